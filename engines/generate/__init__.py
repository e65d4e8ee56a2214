"""The generate engine: the answer without a model (`answer.answer_for`: extractive from the
contexts, `extractive`, or the tools' outcomes, `tools`) and with one (`llm`: the prompt, the
tool turns, citation hygiene). The generate worker runs it and streams what a model writes."""
