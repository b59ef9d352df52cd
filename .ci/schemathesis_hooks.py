"""schemathesis hooks for `.ci/schemathesis`.

Each generated request comes from its own client address (`X-Forwarded-For`, which the server
under test trusts from its loopback peer): the checks that send wrong credentials on purpose
would otherwise put 127.0.0.1 over the limit of failed authentications, and every later
request would be answered 429 before its credential is looked at.

Each valid `Idempotency-Key` is made unique the same way: keys are the account's, and the same
key on two requests with different bodies is a 400 by design (CONTRACT §3), which generated
keys ("0", "00", …) would hit on nearly every POST. An invalid key is sent as generated.
"""

import itertools
import re

# Pinned with `.ci/schemathesis` (`_record_starting_state` is schemathesis's own, 4.32).

import schemathesis

_requests = itertools.count(1)


@schemathesis.hook
def before_call(context, case, kwargs):
    n = next(_requests)
    address = f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"
    headers = {**(case.headers or {}), "X-Forwarded-For": address}
    key = headers.get("Idempotency-Key")
    if isinstance(key, str) and _valid_key(key):
        suffix = f"-{n}"
        headers["Idempotency-Key"] = key[: 255 - len(suffix)] + suffix
    case.headers = headers
    # The address is transport, not test data: without this, schemathesis would revalidate the
    # case and take a request generated without `Authorization` (to test that the server asks
    # for it) as a valid one, and send the configured key after all.
    case._record_starting_state()


def _valid_key(key):
    """What the document's `Idempotency-Key` pattern accepts: printable ASCII, no space at
    either end."""
    return re.fullmatch(r"[!-~]([ -~]*[!-~])?", key) is not None
