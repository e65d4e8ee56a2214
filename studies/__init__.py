"""The studies behind past decisions, apart from the product: each runs by hand as
`python -m studies.<name>`, for a decision that is made or a reading that is taken, and its
result is in `results/` and the docs (`studies/README.md` lists them). They may import any of
the product's packages (`bench.evaluation`, `engines`, `infra`, ...); nothing in the product
imports them (`[tool.importlinter]`'s `studies` contract), and the package is not installed.
"""
