"""schemathesis hooks for `.ci/schemathesis`.

Every request comes from the one address of the machine that runs schemathesis, as requests
from behind a load balancer do: the checks that send wrong or no credentials on purpose must
not keep valid ones from being served (CONTRACT §2), so nothing here varies the client address.

Each valid `Idempotency-Key` is made unique: keys are the account's, and the same key on two
requests with different bodies is a 400 by design (CONTRACT §3), which generated keys ("0",
"00", …) would hit on nearly every POST. An invalid key is sent as generated.

One check is told one documented answer (see `.ci/schemathesis.toml`): `ignored_auth` probes
each operation with a wrong credential and expects 401 or 403, but CONTRACT §2 answers 429
`rate_limit` to a wrong credential once its address has had 20 failures in 60 s, which
probing 49 operations from one address reaches. That 429 refuses the request as surely as a
401; it is accepted only for a probe that carried a credential, so a request without one must
still be answered 401.
"""

import itertools
import json
import re

# Pinned with `.ci/schemathesis` (`_record_starting_state` and `_enforces_auth` are
# schemathesis's own, 4.32).

import schemathesis
from schemathesis.specs.openapi import checks as _openapi_checks

_requests = itertools.count(1)


@schemathesis.hook
def before_call(context, case, kwargs):
    n = next(_requests)
    key = (case.headers or {}).get("Idempotency-Key")
    if not (isinstance(key, str) and _valid_key(key)):
        return
    suffix = f"-{n}"
    case.headers = {**case.headers, "Idempotency-Key": key[: 255 - len(suffix)] + suffix}
    # The suffix is transport, not test data: without this, schemathesis would revalidate the
    # case and take a request generated without `Authorization` (to test that the server asks
    # for it) as a valid one, and send the configured key after all.
    case._record_starting_state()


def _valid_key(key):
    """What the document's `Idempotency-Key` pattern accepts: printable ASCII, no space at
    either end."""
    return re.fullmatch(r"[!-~]([ -~]*[!-~])?", key) is not None


_enforces_auth = _openapi_checks._enforces_auth


def _enforces_auth_or_limits_failures(response, authenticated):
    """`ignored_auth`'s own test, and a 429 `rate_limit` to a request that carried a
    credential (CONTRACT §2: the answer to a wrong credential from an address past its limit
    of failed authentications)."""
    return _enforces_auth(response, authenticated) or (
        response.status_code == 429
        and "Authorization" in response.request.headers
        and _error_type(response) == "rate_limit"
    )


def _error_type(response):
    try:
        return json.loads(response.content)["error"]["type"]
    except (ValueError, KeyError, TypeError):
        return None


_openapi_checks._enforces_auth = _enforces_auth_or_limits_failures
