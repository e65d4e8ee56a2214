"""OCR: page images read by Debian's `tesseract` program, and image files (PNG, JPEG, TIFF;
each frame of a TIFF a page) made into documents through it.

tesseract runs as a program, one per page (`--oem 1`: its LSTM model; `--psm 3`: it finds
the columns and paragraphs itself), each on one thread (`OMP_THREAD_LIMIT=1`), up to
`ParseLimits.ocr_workers` at once while the next pages are rendered. Each has the time the
parse has left, and at most `OCR_PAGE_TIMEOUT_S`. Its paragraphs (blank-line separated) have
their lines joined as the text conventions say (`infra.documents.text`).

An image file's properties (`infra.documents.properties`): its EXIF `Artist` as the author,
`DateTimeOriginal` (else `DateTimeDigitized`) as created, with its `OffsetTimeOriginal` where
it states one (else the time is taken as UTC), `DateTime` as modified; and its frame count.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import threading
import warnings
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from infra.documents.model import (
    Deadline,
    ParsedDocument,
    ParseLimits,
    ParseRefused,
    ParserFailed,
    display_name,
)
from infra.documents.properties import file_properties, first_date
from infra.documents.text import PagedText, blocks_text, choose_title, paragraphs_of

if TYPE_CHECKING:
    from PIL import Image

OCR_PAGE_TIMEOUT_S = 60.0
INSTALL_HINT = "install tesseract-ocr (make setup)"
LANGUAGE = "eng"


def tesseract_program() -> str | None:
    return shutil.which("tesseract")


class OcrRunner:
    """tesseract over page images, several at once; `submit` a page, then take its text from
    the future in page order. `close` stops any still running."""

    def __init__(self, filename: str, limits: ParseLimits, deadline: Deadline) -> None:
        program = tesseract_program()
        if program is None:
            raise ParserFailed(
                f"{display_name(filename)} needs OCR, but the tesseract program is missing: "
                f"{INSTALL_HINT}"
            )
        self.program = program
        self.filename = filename
        self.deadline = deadline
        self.workers = limits.ocr_workers
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="ocr")
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._pending: deque[Future[str]] = deque()
        self._closed = False
        self.env = {**os.environ, "OMP_THREAD_LIMIT": "1"}

    def submit(self, image: Image.Image, page: int, dpi: int | None) -> Future[str]:
        """OCR of `image` (page `page`, scanned at `dpi` if known). Waits while as many pages
        as there are workers, and as many again, are already waiting, so few images are held."""
        while len(self._pending) >= 2 * self.workers:
            oldest = self._pending.popleft()
            if not oldest.done():
                self.wait(oldest)
        png = io.BytesIO()
        image.save(png, "PNG", compress_level=1)
        future = self._executor.submit(self._run, png.getvalue(), page, dpi)
        self._pending.append(future)
        return future

    def wait(self, future: Future[str]) -> str:
        try:
            return future.result(timeout=max(self.deadline.remaining(), 0) + 1.0)
        except TimeoutError as exc:
            raise self.deadline.overrun() from exc

    def _run(self, png: bytes, page: int, dpi: int | None) -> str:
        command = [self.program, "-", "-", "-l", LANGUAGE, "--oem", "1", "--psm", "3"]
        if dpi:
            command += ["--dpi", str(dpi)]
        timeout = min(OCR_PAGE_TIMEOUT_S, self.deadline.remaining())
        if timeout <= 0:
            raise self.deadline.overrun()
        with self._lock:
            if self._closed:
                raise ParserFailed("OCR was stopped")
            try:
                process = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=self.env,
                )
            except OSError as exc:  # out of memory or processes, or the program went away
                raise ParserFailed(f"tesseract could not be started ({exc})") from exc
            self._running.add(process)
        try:
            out, err = process.communicate(png, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            process.communicate()
            if self.deadline.remaining() <= 0:
                raise self.deadline.overrun() from exc
            raise ParserFailed(
                f"OCR ran past {OCR_PAGE_TIMEOUT_S:g} s on page {page} of "
                f"{display_name(self.filename)}; it was stopped"
            ) from exc
        finally:
            with self._lock:
                self._running.discard(process)
        if process.returncode != 0:
            why = err.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
            raise ParserFailed(
                f"tesseract failed on page {page} of {display_name(self.filename)} "
                f"(exit {process.returncode}: {why[0][:200]})"
            )
        return blocks_text(paragraphs_of(out.decode("utf-8", errors="replace")))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for process in self._running:
                process.kill()
        for future in self._pending:
            future.cancel()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> OcrRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ready_for_ocr(image: Image.Image) -> Image.Image:
    """Grey scale, transparency on white (a transparent background would turn black)."""
    from PIL import Image

    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(white, rgba)
    return image if image.mode in ("L", "1") else image.convert("L")


def _refuse_bomb(filename: str, pixels: int | None, limits: ParseLimits) -> ParseRefused:
    size = f"{pixels:,} pixels" if pixels else "too many pixels"
    return ParseRefused(
        f"{display_name(filename)} is an image of {size}; at most "
        f"{limits.max_pixels:,} are read (a decompression bomb?)"
    )


def _pixels_in(warning: Exception) -> int | None:
    """The image's size in Pillow's own decompression-bomb message, if it says."""
    match = re.search(r"\((\d+) pixels\)", str(warning))
    return int(match.group(1)) if match else None


def parse_image(
    data: bytes, filename: str, media_type: str, limits: ParseLimits, deadline: Deadline
) -> ParsedDocument:
    """An image file read by OCR, one page per frame."""
    from PIL import Image, ImageOps

    name = display_name(filename)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > limits.max_pixels:
                raise _refuse_bomb(filename, width * height, limits)
            frames = getattr(image, "n_frames", 1)
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise _refuse_bomb(filename, _pixels_in(exc), limits) from exc
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise ParseRefused(f"{name} is a damaged image; ragbus cannot read it") from exc
        if frames > limits.max_pages:
            raise ParseRefused(
                f"{name} has {frames:,} pages; at most {limits.max_pages:,} are read "
                "(RAGBUS_MAX_PAGES)"
            )
        properties = file_properties(media_type, lambda: _exif(image), pages=frames)
        paged = PagedText(limits, filename)
        with OcrRunner(filename, limits, deadline) as ocr:
            futures = []
            for number in range(1, frames + 1):
                deadline.check()
                try:
                    image.seek(number - 1)
                    if image.size[0] * image.size[1] > limits.max_pixels:
                        raise _refuse_bomb(filename, image.size[0] * image.size[1], limits)
                    frame = ready_for_ocr(ImageOps.exif_transpose(image))
                except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
                    raise _refuse_bomb(filename, _pixels_in(exc), limits) from exc
                except (OSError, SyntaxError, ValueError, EOFError) as exc:
                    raise ParseRefused(
                        f"{name} is a damaged image (frame {number}); ragbus cannot read it"
                    ) from exc
                futures.append(ocr.submit(frame, number, _image_dpi(image)))
            for future in futures:
                paged.add(ocr.wait(future))
    text, pages = paged.finish()
    if not text.strip():
        raise ParseRefused(f"{name} holds no text that OCR could read")
    return ParsedDocument(
        title=choose_title(filename),
        text=text,
        pages=pages,
        media_type=media_type,
        ocr_pages=frames,
        properties=properties,
    )


_ARTIST = 0x013B
_DATE_TIME = 0x0132
_EXIF_IFD = 0x8769
_ORIGINAL = 0x9003
_DIGITIZED = 0x9004
_ORIGINAL_OFFSET = 0x9011
_DIGITIZED_OFFSET = 0x9012


def _exif(image: Image.Image) -> dict[str, Any]:
    """What an image's EXIF says about it (raw: `file_properties` cleans it)."""
    exif = image.getexif()
    inner = exif.get_ifd(_EXIF_IFD)

    def dated(tag: int, offset_tag: int) -> Any:
        value, offset = inner.get(tag), inner.get(offset_tag)
        if (
            isinstance(value, str)
            and isinstance(offset, str)
            and re.fullmatch(r"[+-]\d{2}:\d{2}", offset.strip())
        ):
            return f"{value.strip()}{offset.strip()}"
        return value

    return {
        "author": exif.get(_ARTIST),
        "created": first_date(
            dated(_ORIGINAL, _ORIGINAL_OFFSET), dated(_DIGITIZED, _DIGITIZED_OFFSET)
        ),
        "modified": exif.get(_DATE_TIME),
    }


def _image_dpi(image: Image.Image) -> int | None:
    """The image's own resolution, where it states a plausible one."""
    dpi = image.info.get("dpi")
    try:
        value = round(float(dpi[0])) if dpi else 0
    except (TypeError, ValueError, IndexError):
        return None
    return value if 70 <= value <= 2400 else None
