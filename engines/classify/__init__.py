"""The classify engine: a question's intent and channel weights (`classifier`: rules, the
trained model of `intent_model`, zero-shot), its form (`query_form`, `rules`), and a session's
question made standalone (`rewrite`, `llm_rewrite`).

Beside it, the offline tooling that makes and judges the model: its labelled data
(`intent_data/`, read by `dataset`, NF-CATS's questions by `nf_cats`), training (`training`,
the cue head `cue_head`, what a model says of itself `model_meta`) and evaluation
(`evaluation`). The classify and search workers run the engine; `ragbus train-intent` and
`ragbus eval-intent` the tooling.
"""
