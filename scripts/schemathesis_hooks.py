"""Schemathesis hooks for scripts/schemathesis (loaded through SCHEMATHESIS_HOOKS).

One hook, which corrects one false positive of Schemathesis 4.32.5 and hides nothing else.

A negative test case can carry a mutation that is lost on the way to the wire: a query
parameter mutated to `{}` is sent as `pretty=` (the empty text the document allows), `[]` is
not sent at all. Schemathesis guards against that by validating the query *as sent*
against the document, but it does not decode parameters whose value is JSON text
(`content: application/json`, as our `query` and `sort` are): it validates their JSON text
against the object schema, which always fails. So a case whose only effective mutation was
lost is reported as "schema-violating request accepted" (ST201) whenever a `query` is
present (CI, 2026-11-27: GET /rest/permissions with `pretty=` and a valid `query`).

The hook reads the URL that was actually requested, decodes each parameter as the document
says it is carried (JSON text for `content` parameters; a number or a boolean where the
schema admits one; a float is not read, as the server reads none), and drops the failure only when every parameter as sent is valid, all
required ones are there, no undeclared one was sent, and nothing outside the query was
negative. Any doubt keeps the failure. Dropped failures are counted in Schemathesis' own
summary ("dropped by filter_failure").
"""

import json
from urllib.parse import parse_qs, urlparse

import schemathesis
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.core.parameters import ParameterLocation


@schemathesis.hook
def filter_failure(context, failure, case, response):
    if not isinstance(failure, AcceptedNegativeData):
        return True
    try:
        return not query_as_sent_is_valid(case, response)
    except Exception:  # any doubt keeps the failure
        return True


def query_as_sent_is_valid(case, response):
    meta = case.meta
    if meta is None:
        return False
    for location, component in meta.components.items():
        if location != ParameterLocation.QUERY and component.mode.is_negative:
            return False
    url = urlparse(response.request.url)
    if case.path_parameters or not url.path.endswith(case.path):
        return False
    sent = parse_qs(url.query, keep_blank_values=True)
    declared = {p.name: p for p in case.operation.get_parameter_set(ParameterLocation.QUERY)}
    if any(name not in declared for name in sent):
        return False
    for name, parameter in declared.items():
        texts = sent.get(name)
        if texts is None:
            if parameter.is_required:
                return False
            continue
        if len(texts) != 1 or not any(parameter.is_valid(v) for v in readings(parameter, texts[0])):
            return False
    return True


def readings(parameter, text):
    """The values the server may read from `text`: what the document says the text carries."""
    if "content" in parameter.definition:
        try:
            return [json.loads(text)]
        except ValueError:
            return []
    values = [text]
    try:
        values.append(int(text))
    except ValueError:
        pass
    if text.lower() in ("true", "false"):
        values.append(text.lower() == "true")
    return values
