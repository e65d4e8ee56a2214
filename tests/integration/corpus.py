"""A tiny corpus whose facts the integration tests ask about."""

from __future__ import annotations

from contracts.ingest import DocumentIn

DOCUMENTS = [
    DocumentIn(
        id="lighthouse-alexandria",
        title="The Lighthouse of Alexandria",
        text=(
            "# The Lighthouse of Alexandria\n\n"
            "The Lighthouse of Alexandria was built on the island of Pharos by Sostratus of "
            "Cnidus. Construction finished around 280 BC under Ptolemy II Philadelphus. "
            "The tower stood about 100 metres tall and guided ships into the harbour.\n\n"
            "## Destruction\n\n"
            "Earthquakes between 956 and 1323 AD damaged the Lighthouse of Alexandria. "
            "Its stones were later reused in the Citadel of Qaitbay."
        ),
    ),
    DocumentIn(
        id="colossus-rhodes",
        title="The Colossus of Rhodes",
        text=(
            "# The Colossus of Rhodes\n\n"
            "The Colossus of Rhodes was a bronze statue of the sun god Helios. The sculptor "
            "Chares of Lindos completed it in 280 BC after twelve years of work. "
            "An earthquake in 226 BC snapped the statue at the knees."
        ),
    ),
    DocumentIn(
        id="hanging-gardens",
        title="The Hanging Gardens of Babylon",
        text=(
            "# The Hanging Gardens of Babylon\n\n"
            "Greek writers describe the Hanging Gardens of Babylon as terraces of trees and "
            "plants watered by screw pumps. Tradition credits Nebuchadnezzar II with building "
            "them for his wife Amytis. No Babylonian text mentions the gardens."
        ),
    ),
    DocumentIn(
        id="great-pyramid",
        title="The Great Pyramid of Giza",
        text=(
            "# The Great Pyramid of Giza\n\n"
            "The Great Pyramid of Giza was built for the pharaoh Khufu around 2560 BC. "
            "It is the oldest of the Seven Wonders and the only one still standing. "
            "It was the tallest man-made structure for over 3,800 years."
        ),
    ),
]

QUESTION = "Who built the Lighthouse of Alexandria?"
EXPECTED_DOCUMENT = "lighthouse-alexandria"
