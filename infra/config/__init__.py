"""The groups of settings `infra.settings.Settings` is composed of, one module per concern, in
the order docs/configuration.md lists them: where the services are (`services`), the API and
its tenants (`api`), a request's attempts and deadlines (`saga`), the bus's delivery to the
workers (`delivery`), retrieval and its models (`retrieval`), uploaded files (`files`), and
generation and tools (`generation`).

Each group is a plain pydantic model holding its fields, the validators that read only them
and the properties derived from them; `Settings` adds the `RAGBUS_` environment, the logs and
what spans groups. Read settings through `infra.settings`, never a group alone: a group reads
no environment, and none of these modules imports `infra.settings`.
"""
