"""Offline entity extraction and query norms."""

from __future__ import annotations

from infra.retrieval.entities import Entity, extract_entities, normalize, query_entities

TEXT = (
    "The Mayo Clinic studied BRCA1 carriers. Patients with COVID-19 had high IL-6 levels. "
    "Water (H2O) intake was recorded by Dr. Alice Walker in Finland. "
    "Statin use lowered breast cancer mortality. Breast cancer patients on statin therapy "
    "lived longer. What about mRNA vaccines?"
)


def _by_norm(entities: list[Entity]) -> dict[str, Entity]:
    return {e.norm: e for e in entities}


def test_acronyms_and_symbols() -> None:
    found = _by_norm(extract_entities(TEXT))
    for name, norm in [
        ("BRCA1", "brca1"),
        ("COVID-19", "covid19"),
        ("IL-6", "il6"),
        ("H2O", "h2o"),
        ("mRNA", "mrna"),
    ]:
        assert found[norm] == Entity(name=name, norm=norm, kind="acronym")


def test_proper_spans_skip_sentence_initial_stop_words() -> None:
    found = _by_norm(extract_entities(TEXT))
    assert found["mayo clinic"].kind == "proper"
    assert found["mayo clinic"].name == "Mayo Clinic"
    assert found["alice walker"].kind == "proper"
    assert found["finland"].kind == "proper"
    assert "the mayo clinic" not in found
    assert "patient" not in found or found["patient"].kind == "term"
    assert "what" not in found and "water" not in found  # sentence-initial single words


def test_repeated_terms_and_bigrams() -> None:
    found = _by_norm(extract_entities(TEXT))
    assert found["breast cancer"].kind == "term"
    assert found["statin"].kind == "term"
    assert "therapy" not in found  # said once only
    assert "mortal" not in found


def test_dedupe_and_cap() -> None:
    text = " ".join(f"Gene ABC{i} and gene ABC{i} again." for i in range(50))
    entities = extract_entities(text)
    assert len(entities) == 30
    assert len({e.norm for e in entities}) == 30


def test_normalize_stems_last_word_and_strips_punctuation() -> None:
    assert normalize(["Breast", "Cancers"]) == "breast cancer"
    assert normalize(["COVID-19"]) == "covid19"
    assert normalize(["Statins,"]) == "statin"
    assert normalize(["--"]) == ""


def test_query_entities_cover_lowercase_queries() -> None:
    norms = query_entities("does brca1 raise breast cancer risk in the Mayo Clinic cohort?")
    for expected in ("brca1", "breast cancer", "cancer", "risk", "mayo clinic", "cohort"):
        assert expected in norms
    assert "the" not in norms and "does" not in norms
    assert len(norms) == len(set(norms))
