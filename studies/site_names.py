"""The web sites whose bare name is a navigational query: `engines/classify/intent_data/
site_names.txt`, derived from a public list of the web's most linked sites.

Whoever types "youtube", "netflix" or "the guardian" into a search box wants that site, as
whoever types "gmail login" does (`engines.classify.query_form.SITE_CUES`). ORCAS-I's labelling
functions (Alexander et al., SIGIR 2022) find such queries by the clicked URL's domain, which
a query does not carry here; a list of well-known sites' names stands in for it.

The source is github.com/Kikobeats/top-sites (MIT, © Kiko Beats), `top-sites.json`: the Moz
Top 500, the 500 domains with the most linking root domains. This keeps each domain's
registrable name (`en.wikipedia.org` → `wikipedia`, `bbc.co.uk` → `bbc`), letters only, and
leaves out:
- names of fewer than three letters (`x`, `vk`, `hp`): too easily a word or an initialism;
- names that are also ordinary words or a common name (`apple`, `time`, `nature`, `target`,
  `medium`, `zoom`) or an institution people ask about (`nasa`, `who`, `harvard`): a bare one
  is a topic more often than a site (`COMMON`, written by hand from the list, not from any
  labelled query);
- adult sites, which a product's data need not name.

    git clone https://github.com/Kikobeats/top-sites /tmp/top-sites
    python -m studies.site_names /tmp/top-sites/top-sites.json \
        --out engines/classify/intent_data/site_names.txt
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SECOND_LEVEL = frozenset(
    {"co.uk", "org.uk", "ac.uk", "gov.uk", "com.br", "gov.br", "co.jp", "ne.jp", "or.jp"}
    | {"com.au", "co.in", "com.co", "co.nz", "go.com"}
)
"""Public suffixes of two labels in the list: the name is the label before them."""

COMMON = frozenset(
    """
    about abc android apache apple archive berkeley bit booking cam cambridge canva cdc change
    cornell dan disney doi economist epa europa example excite express fifa forms fortune ftc go
    goo guardian harvard hilton home icann ieee ign independent insider intel java lin line live
    loc mail marriott medium mega messenger metro mirror mit nasa nature net news nhs nih noaa
    oecd office offset opera oracle pages princeton reg safety sakura scoop shopify sky slate
    springer standard stanford stuff target telegram terra tes thehill time unesco usda usgs
    variety vice wallpapers who wiley wired www zoom discord
    """.split()  # noqa: SIM905 (a block of words reads better than 97 quoted lines)
)
"""Names that are also ordinary words, common names or institutions people ask about."""

ADULT = frozenset({"chaturbate", "pornhub"})

HEADER = """\
# Web sites whose bare name is a navigational query (engines/classify/query_form.py).
# Derived by studies/site_names.py (its docstring says how and what is left out) from the
# Moz Top 500 in github.com/Kikobeats/top-sites (MIT licence, (c) Kiko Beats).
"""


def site_name(domain: str) -> str | None:
    parts = domain.lower().strip(".").split(".")
    if len(parts) < 2:
        return None
    two_level = ".".join(parts[-2:]) in SECOND_LEVEL and len(parts) >= 3
    name = (parts[-3] if two_level else parts[-2]).replace("-", "")
    keep = name.isalpha() and len(name) >= 3 and name not in COMMON | ADULT
    return name if keep else None


def site_names(sites: list[dict[str, object]]) -> list[str]:
    names = {
        site_name(str(site["rootDomain"])) for site in sites if "..." not in str(site["rootDomain"])
    }
    return sorted(name for name in names if name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("top_sites", type=Path, help="top-sites.json of Kikobeats/top-sites")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    names = site_names(json.loads(args.top_sites.read_text(encoding="utf-8")))
    args.out.write_text(HEADER + "\n".join(names) + "\n", encoding="utf-8")
    print(f"wrote {len(names)} site names to {args.out}")


if __name__ == "__main__":
    main()
