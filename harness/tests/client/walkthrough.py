"""The README's walk-through, through a client that openapi-python-client generated from
`/openapi.json`: every call to `billing` goes through the generated functions and models, and
every answer is read as the type the document promises. Only the sandbox processor's own
routes (acceptance tokens, card and Nequi tokens), which are not part of the document, are
called with plain httpx, as the README calls them with curl.

    python3 walkthrough.py BASE_URL API_KEY ADMIN_TOKEN CLIENT_DIR

CLIENT_DIR is the generated package (`openapi-python-client generate --meta none
--output-path CLIENT_DIR/../billing_client`); it needs httpx, attrs and python-dateutil.
Exits non-zero at the first answer that differs from the README's.
"""

import hashlib
import hmac
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import httpx

BASE, KEY, ADMIN, CLIENT_DIR = sys.argv[1:5]
sys.path.insert(0, str(Path(CLIENT_DIR).resolve().parent))

# The generated package is importable once its folder is on the path.
from billing_client import AuthenticatedClient
from billing_client.api.account import get_account
from billing_client.api.admin import top_up
from billing_client.api.balance import get_balance, list_balance_transactions
from billing_client.api.charges import create_refund, get_charge, list_charges
from billing_client.api.checkout import (
    create_checkout_session,
    get_checkout_session_status,
    list_checkout_sessions,
)
from billing_client.api.customers import (
    create_customer,
    create_payment_method,
    list_customers,
    list_payment_methods,
)
from billing_client.api.events import list_events, redeliver_event
from billing_client.api.plans import create_plan, list_plans
from billing_client.api.subscriptions import (
    create_subscription,
    get_subscription,
    pause_subscription,
)
from billing_client.api.test_helpers import advance_clock
from billing_client.api.webhooks import create_endpoint, list_deliveries
from billing_client.models import (
    AccountOut,
    AdvanceIn,
    BalanceOut,
    BalanceTransactionType,
    CatalogItemIn,
    CatalogItemOut,
    ChargeOut,
    ChargePurpose,
    ChargeStatus,
    CheckoutSessionIn,
    CheckoutSessionInMetadataType0,
    CheckoutSessionOut,
    CheckoutSessionStatus,
    CheckoutSessionStatusOut,
    ClockOut,
    CustomerIn,
    CustomerInMetadataType0,
    CustomerOut,
    Cycle,
    DeliveryStatus,
    EndpointIn,
    EndpointInEventsItem,
    EndpointOut,
    ErrorBody,
    ErrorType,
    EventOutType,
    ListOutBalanceTransactionOut,
    ListOutCatalogItemOut,
    ListOutChargeOut,
    ListOutCheckoutSessionOut,
    ListOutCustomerOut,
    ListOutDeliveryOut,
    ListOutEventOut,
    ListOutPaymentMethodOut,
    NewCustomerIn,
    PaymentMethodIn,
    PaymentMethodOut,
    RedeliveryOut,
    RefundIn,
    RefundOut,
    RefundStatus,
    SourceKind,
    SubscriptionIn,
    SubscriptionInMetadataType0,
    SubscriptionOut,
    SubscriptionStatus,
    TopUpIn,
)
from billing_client.types import Response

T = TypeVar("T")

api = AuthenticatedClient(base_url=BASE, token=KEY, timeout=httpx.Timeout(60.0))
admin = AuthenticatedClient(base_url=BASE, token=ADMIN, timeout=httpx.Timeout(60.0))


def expect(response: Response[Any], status: int, kind: type[T]) -> T:
    """The parsed answer, after checking its status and that it parsed as `kind`."""
    assert response.status_code == status, (
        f"expected {status}, got {response.status_code}: {response.content!r}"
    )
    assert isinstance(response.parsed, kind), (
        f"expected a {kind.__name__}, got {response.parsed!r} from {response.content!r}"
    )
    return response.parsed


def expect_error(response: Response[Any], status: int, kind: ErrorType, param: str | None) -> str:
    """The message of an error answer, after checking it parsed as `ErrorBody` with this
    `error.type` and `error.param`."""
    error = expect(response, status, ErrorBody).error
    assert error.type_ is kind, f"expected {kind}, got {error.type_}: {error.message}"
    assert error.param == param, f"expected param {param!r}, got {error.param!r}"
    return error.message


def same(actual: tuple[Any, ...], expected: tuple[Any, ...]) -> None:
    """Equal and of the same types: a value the document types as an enumeration is read as
    one, not as a string that happens to be equal."""
    assert actual == expected, f"{actual!r} != {expected!r}"
    for got, want in zip(actual, expected):
        assert type(got) is type(want), (
            f"{got!r} is a {type(got).__name__}, not a {type(want).__name__}"
        )


def eventually(what: str, check: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"not within {within} s: {what}"
        time.sleep(0.2)


def step(title: str) -> None:
    print(f"-- {title}", flush=True)


# ---- Five-minute walk-through

step("who am I")
account = expect(get_account.sync_detailed(client=api), 200, AccountOut)
assert account.id.startswith("acct_") and account.sandbox
public_key = account.processor.public_key
assert public_key.startswith("pub_test_")

step("a plan, twice under one Idempotency-Key")
pro_in = CatalogItemIn(name="Pro", monthly_amount_cents=4_990_000, annual_amount_cents=49_900_000)
pro = expect(
    create_plan.sync_detailed(client=api, body=pro_in, idempotency_key="plan-pro-1"),
    201,
    CatalogItemOut,
)
same(
    (pro.name, pro.monthly_amount_cents, pro.annual_amount_cents, pro.active),
    ("Pro", 4_990_000, 49_900_000, True),
)
replayed = expect(
    create_plan.sync_detailed(client=api, body=pro_in, idempotency_key="plan-pro-1"),
    201,
    CatalogItemOut,
)
assert replayed.id == pro.id

step("a customer with metadata")
ana_in = CustomerIn(
    email="ana@example.co", name="Ana", metadata=CustomerInMetadataType0.from_dict({"crm_id": "42"})
)
ana = expect(create_customer.sync_detailed(client=api, body=ana_in), 201, CustomerOut)
assert ana.id.startswith("cus_") and ana.metadata and ana.metadata["crm_id"] == "42"

step("lists, newest first")
plans = expect(list_plans.sync_detailed(client=api, limit=10), 200, ListOutCatalogItemOut)
assert [plan.id for plan in plans.data] == [pro.id] and not plans.has_more
customers = expect(list_customers.sync_detailed(client=api, limit=10), 200, ListOutCustomerOut)
assert customers.data[0].id == ana.id

step("a mistake, read as the error model")
# A checked program could not build this body; the README sends it to show the error's shape.
lots: Any = "lots"
message = expect_error(
    create_plan.sync_detailed(
        client=api, body=CatalogItemIn(name="Pro", monthly_amount_cents=lots, annual_amount_cents=1)
    ),
    400,
    ErrorType.INVALID_REQUEST,
    "monthly_amount_cents",
)
assert "monthly_amount_cents" in message

step("the balance, topped up by the operator")
expect(
    top_up.sync_detailed(account.id, client=admin, body=TopUpIn(amount_cents=10_000_000)),
    201,
    BalanceOut,
)
balance = expect(get_balance.sync_detailed(client=api), 200, BalanceOut)
same((balance.available_cents, balance.reserved_cents, balance.currency), (10_000_000, 0, "COP"))
ledger = expect(
    list_balance_transactions.sync_detailed(client=api), 200, ListOutBalanceTransactionOut
)
assert [(t.type_, t.amount_cents) for t in ledger.data] == [
    (BalanceTransactionType.TOP_UP, 10_000_000)
]

# ---- A card at the sandbox processor (its own routes: plain httpx, as the README's curl)

processor = httpx.Client(base_url=f"{BASE}/sandbox/processor/v1", timeout=30.0)


def processor_data(response: httpx.Response) -> dict[str, Any]:
    assert response.is_success, (
        f"the sandbox processor answered {response.status_code}: {response.text}"
    )
    data: dict[str, Any] = response.json()["data"]
    return data


step("the processor's acceptance tokens, and a card token")
info = processor_data(
    processor.get("/merchants/info", headers={"x-merchant-public-key": public_key})
)
acceptance = info["presigned_acceptance"]["acceptance_token"]
personal = info["presigned_personal_data_auth"]["acceptance_token"]
card = {
    "number": "4242424242424242",
    "cvc": "123",
    "exp_month": "08",
    "exp_year": "30",
    "card_holder": "Ana Gomez",
}
card_token = processor_data(
    processor.post("/tokens/cards", json=card, headers={"Authorization": f"Bearer {public_key}"})
)["id"]

step("both acceptances are required")
cus = expect(
    create_customer.sync_detailed(client=api, body=CustomerIn(email="ana@example.co", name="Ana")),
    201,
    CustomerOut,
)
expect_error(
    create_payment_method.sync_detailed(
        cus.id, client=api, body=PaymentMethodIn(card_token=card_token, acceptance_token=acceptance)
    ),
    400,
    ErrorType.INVALID_REQUEST,
    "accept_personal_auth",
)

step("the card attached")
card_in = PaymentMethodIn(
    card_token=card_token, acceptance_token=acceptance, accept_personal_auth=personal
)
pm = expect(
    create_payment_method.sync_detailed(cus.id, client=api, body=card_in), 201, PaymentMethodOut
)
same((pm.customer_id, pm.type_, pm.brand, pm.last4), (cus.id, SourceKind.CARD, "VISA", "4242"))

# ---- Nequi

step("a Nequi token, approved in the app, attached")
auth = {"Authorization": f"Bearer {public_key}"}
nequi_token = processor_data(
    processor.post("/tokens/nequi", json={"phone_number": "3991111111"}, headers=auth)
)["id"]
eventually(
    "the Nequi token is final",
    lambda: (
        processor_data(processor.get(f"/tokens/nequi/{nequi_token}", headers=auth))["status"]
        != "PENDING"
    ),
)
luis = expect(
    create_customer.sync_detailed(
        client=api, body=CustomerIn(email="luis@example.co", name="Luis")
    ),
    201,
    CustomerOut,
)
nequi_in = PaymentMethodIn(
    type_=SourceKind.NEQUI,
    nequi_token=nequi_token,
    acceptance_token=acceptance,
    accept_personal_auth=personal,
)
nequi = expect(
    create_payment_method.sync_detailed(luis.id, client=api, body=nequi_in), 201, PaymentMethodOut
)
same((nequi.type_, nequi.brand, nequi.last4), (SourceKind.NEQUI, None, "1111"))

# ---- Subscriptions and the test clock

step("a subscription, its first month charged at once")
basic_in = CatalogItemIn(
    name="Basic", monthly_amount_cents=3_000_000, annual_amount_cents=30_000_000
)
basic = expect(create_plan.sync_detailed(client=api, body=basic_in), 201, CatalogItemOut)
methods = expect(
    list_payment_methods.sync_detailed(cus.id, client=api), 200, ListOutPaymentMethodOut
)
assert [method.id for method in methods.data] == [pm.id]
sub_in = SubscriptionIn(
    customer_id=cus.id,
    plan_id=basic.id,
    cycle=Cycle.MONTHLY,
    payment_method_id=pm.id,
    metadata=SubscriptionInMetadataType0.from_dict({"order": "A-1"}),
)
sub = expect(create_subscription.sync_detailed(client=api, body=sub_in), 201, SubscriptionOut)
same(
    (sub.status, sub.cycle, sub.plan_id, sub.failed_attempts),
    (SubscriptionStatus.ACTIVE, Cycle.MONTHLY, basic.id, 0),
)

step("the test clock a month on: the renewal")
expect(advance_clock.sync_detailed(client=api, body=AdvanceIn(seconds=2_678_400)), 200, ClockOut)
renewed = expect(get_subscription.sync_detailed(sub.id, client=api), 200, SubscriptionOut)
assert (
    renewed.status is SubscriptionStatus.ACTIVE
    and renewed.current_period_start == sub.current_period_end
)

step("the subscription's events")
events = expect(list_events.sync_detailed(client=api, subscription_id=sub.id), 200, ListOutEventOut)
assert sorted(event.type_ for event in events.data) == [EventOutType.CHARGE_APPROVED] * 2 + [
    EventOutType.INVOICE_CREATED
] * 2 + [EventOutType.SUBSCRIPTION_CREATED]
assert all(event.data.metadata and event.data.metadata["order"] == "A-1" for event in events.data)

# ---- Charges and refunds

step("the approved charges, one refunded in part then in full")
charges = expect(
    list_charges.sync_detailed(client=api, subscription_id=sub.id, status=ChargeStatus.APPROVED),
    200,
    ListOutChargeOut,
)
assert [(c.status, c.amount_cents, c.currency) for c in charges.data] == [
    (ChargeStatus.APPROVED, 3_000_000, "COP")
] * 2
# A direct create's first month is a period's charge like the renewal after it.
assert [c.purpose for c in charges.data] == [ChargePurpose.RENEWAL] * 2
assert [c.period_start for c in charges.data] == [
    renewed.current_period_start,
    sub.current_period_start,
]
charge = charges.data[0]
part = expect(
    create_refund.sync_detailed(
        charge.id, client=api, body=RefundIn(amount_cents=1_000_000, reason="requested_by_customer")
    ),
    201,
    RefundOut,
)
same(
    (part.charge_id, part.amount_cents, part.status, part.reason),
    (charge.id, 1_000_000, RefundStatus.APPROVED, "requested_by_customer"),
)
rest = expect(create_refund.sync_detailed(charge.id, client=api, body=RefundIn()), 201, RefundOut)
same((rest.amount_cents, rest.status), (2_000_000, RefundStatus.APPROVED))
refunded = expect(get_charge.sync_detailed(charge.id, client=api), 200, ChargeOut)
same(
    (refunded.status, refunded.amount_cents, refunded.refunded_amount_cents),
    (ChargeStatus.APPROVED, 3_000_000, 3_000_000),
)
expect_error(
    create_refund.sync_detailed(charge.id, client=api, body=RefundIn()),
    400,
    ErrorType.INVALID_REQUEST,
    "id",
)

# ---- Hosted checkout

step("a checkout session")
session_in = CheckoutSessionIn(
    plan_id=pro.id,
    cycle=Cycle.MONTHLY,
    customer=NewCustomerIn(email="ana@example.co", name="Ana Gómez"),
    success_url="https://shop.example/thanks?order=1001",
    cancel_url="https://shop.example/cart",
    metadata=CheckoutSessionInMetadataType0.from_dict({"order": "1001"}),
)
session = expect(
    create_checkout_session.sync_detailed(
        client=api, body=session_in, idempotency_key="order-1001"
    ),
    201,
    CheckoutSessionOut,
)
same(
    (session.status, session.amount_in_cents, session.currency),
    (CheckoutSessionStatus.OPEN, 4_990_000, "COP"),
)
assert session.url == f"{BASE}/checkout/{session.id}"
status = expect(
    get_checkout_session_status.sync_detailed(session.id, client=api), 200, CheckoutSessionStatusOut
)
same(
    (status.id, status.status, status.subscription_id),
    (session.id, CheckoutSessionStatus.OPEN, None),
)
open_sessions = expect(
    list_checkout_sessions.sync_detailed(client=api, status=CheckoutSessionStatus.OPEN),
    200,
    ListOutCheckoutSessionOut,
)
assert [s.id for s in open_sessions.data] == [session.id]

# ---- Webhooks: a receiver that checks each signature, as the README's receiver.py


class Receiver(BaseHTTPRequestHandler):
    secret: ClassVar[bytes] = b""
    verified: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        parts = dict(p.split("=", 1) for p in self.headers["Service-Signature"].split(","))
        expected = hmac.new(
            self.secret, parts["t"].encode() + b"." + body, hashlib.sha256
        ).hexdigest()
        ok = hmac.compare_digest(expected, parts["v1"])
        if ok:
            Receiver.verified.append(json.loads(body))
        self.send_response(200 if ok else 400)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


step("a webhook endpoint, and the paused subscription's event at it")
server = HTTPServer(("127.0.0.1", 0), Receiver)
hooks = f"http://127.0.0.1:{server.server_port}/hooks"
endpoint_in = EndpointIn(url=hooks, events=[EndpointInEventsItem.VALUE_0])
endpoint = expect(create_endpoint.sync_detailed(client=api, body=endpoint_in), 201, EndpointOut)
same((endpoint.url, endpoint.events, endpoint.active), (hooks, ["*"], True))
assert isinstance(endpoint.secret, str) and endpoint.secret.startswith("whsec_")
Receiver.secret = endpoint.secret.encode()
threading.Thread(target=server.serve_forever, daemon=True).start()
paused = expect(pause_subscription.sync_detailed(sub.id, client=api), 200, SubscriptionOut)
assert paused.status is SubscriptionStatus.PAUSED
eventually(
    "the receiver verified subscription.paused",
    lambda: any(e["type"] == "subscription.paused" for e in Receiver.verified),
)


def delivered_once() -> bool:
    # The receiver answers before the service records the answer: the record follows.
    deliveries = expect(
        list_deliveries.sync_detailed(endpoint.id, client=api), 200, ListOutDeliveryOut
    )
    return [(d.status, d.attempt_count) for d in deliveries.data] == [
        (DeliveryStatus.DELIVERED, 1)
    ]


eventually("the delivery recorded as delivered at the first attempt", delivered_once)

step("an event sent again")
approved = expect(
    list_events.sync_detailed(client=api, type_="charge.approved"), 200, ListOutEventOut
)
again = expect(redeliver_event.sync_detailed(approved.data[0].id, client=api), 202, RedeliveryOut)
assert again.event_id == approved.data[0].id and [d.endpoint_id for d in again.deliveries] == [
    endpoint.id
]
server.shutdown()

print("the walk-through ran through the generated client", flush=True)
