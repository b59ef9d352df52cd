#!/usr/bin/env python3
"""Peak memory of the accountant's exports (CONTRACT §16; benches/README.md, "Exports: peak
memory"). Runs `billing serve` on a fresh SQLite file, seeds a month of N invoices straight into
the database (bulk rows: seeding is not what is measured), restarts the server, and downloads
`GET /v1/exports/invoices.csv` for that month, reading the body as it comes while sampling the
server's resident memory (`VmRSS` every 20 ms, and `VmHWM`, the kernel's own peak, at the end).
Then, in a fresh server process each (so that each peak is its own), the month's ZIP
(`GET /v1/exports/documents.zip`) of M invoices: a PDF drawn per invoice.

Usage:
    python3 benches/exports_memory.py --invoices 100000 --zip-invoices 2000 \
        [--bin target/release/billing]

A flat peak is what streaming means: run it at two sizes and compare. Not a test (it is timed
by nothing, and runs minutes); the figures of the last run are in benches/README.md.
"""

import argparse
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from datetime import datetime, timedelta, timezone

COLOMBIA = timezone(timedelta(hours=-5))
CSV_MONTH = (2026, 10)
ZIP_MONTH = (2026, 9)


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Server:
    def __init__(self, binary, work, port):
        self.binary, self.work, self.port = binary, work, port
        self.base = f"http://127.0.0.1:{port}"
        self.process = None
        self.log = os.path.join(work, "server.log")

    def start(self):
        log = open(self.log, "a")
        self.process = subprocess.Popen(
            [self.binary, "serve", "--bind", f"127.0.0.1:{self.port}",
             "--database-url", f"sqlite://{self.work}/billing.db"],
            stdout=log, stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                urllib.request.urlopen(self.base + "/readyz", timeout=1)
                return
            except Exception:
                if self.process.poll() is not None:
                    sys.exit(open(self.log).read())
                time.sleep(0.1)
        sys.exit("the server did not get ready")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)

    def request(self, method, path, token, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Authorization": f"Bearer {token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read() or b"null")


def month_start_ms(year, month):
    return int(datetime(year, month, 1, tzinfo=COLOMBIA).timestamp() * 1000)


def seed(database, account, customer, count, year, month, first_sequence):
    """`count` approved charges of 49.900,00 and their invoices at IVA 19 %, spread over the
    Colombian month."""
    start = month_start_ms(year, month)
    span = 28 * 86_400_000
    line = {"description": "Plan Pro mensual", "quantity": 1, "amount_cents": 4_990_000,
            "discount_cents": 0, "tax_code": "iva_19", "period_start": None, "period_end": None,
            "plan_id": None, "addon_id": None, "tax_rate_bps": 1900,
            "taxable_base_cents": 4_193_277, "tax_cents": 796_723}
    breakdown = [{"tax_code": "iva_19", "rate_bps": 1900, "taxable_base_cents": 4_193_277,
                  "tax_cents": 796_723}]
    party = {"name": "Ana Gómez", "email": "ana@example.co",
             "tax_id": {"type": "CC", "number": "1020304050"}, "legal_name": None,
             "address": None}
    connection = sqlite3.connect(database, timeout=60)
    charges, rows = [], []
    for i in range(count):
        sequence = first_sequence + i
        at = start + i * span // max(count, 1)
        charge = f"ch_{sequence:032x}"
        # An invoice documents an approved charge of its amount (a trigger holds it).
        charges.append((charge, account, customer, "pm_bench", 4_990_000, 0, charge, "approved",
                        "renewal", at, at, at))
        rows.append((f"in_{sequence:032x}", account, "invoice", sequence, f"FV-{sequence}",
                     charge, customer, json.dumps(party), json.dumps([line]),
                     json.dumps(breakdown), 4_193_277, 796_723, 4_990_000,
                     f"inv_bench_{sequence:012d}", at, 0))
    connection.executemany(
        "INSERT INTO charge_attempts (id, account_id, customer_id, payment_method_id,"
        " amount_cents, fee_cents, reference, status, purpose, created_at, updated_at,"
        " finalized_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", charges)
    connection.executemany(
        "INSERT INTO invoices (id, account_id, series, sequence, number, charge_id, customer_id,"
        " customer, lines, tax_breakdown, subtotal_cents, tax_cents, total_cents, hosted_token,"
        " issued_at, discount_cents) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows)
    connection.commit()
    connection.close()


def measure(server, path, key, out_path):
    """Downloads `path` into `out_path`, sampling the server's memory: (seconds, baseline MiB,
    sampled peak MiB, VmHWM MiB, bytes)."""
    pid = server.process.pid
    baseline = rss_kib(pid)
    peak = [baseline]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    request = urllib.request.Request(server.base + path,
                                     headers={"Authorization": f"Bearer {key}"})
    size = 0
    with urllib.request.urlopen(request, timeout=3600) as response, open(out_path, "wb") as out:
        while chunk := response.read(1 << 16):
            size += len(chunk)
            out.write(chunk)
    elapsed = time.monotonic() - started
    done.set()
    sampler.join()
    hwm = rss_kib(pid, "VmHWM")
    return elapsed, baseline / 1024, peak[0] / 1024, hwm / 1024, size


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--invoices", type=int, default=100_000, help="the CSV's month")
    parser.add_argument("--zip-invoices", type=int, default=2_000, help="the ZIP's month")
    parser.add_argument("--bin", default=os.environ.get("BILLING_BIN", "target/debug/billing"))
    parser.add_argument("--port", type=int, default=18977)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="billing-exports-bench-")
    server = Server(os.path.abspath(args.bin), work, args.port)
    server.start()
    log = open(server.log).read()
    account = re.search(r"acct_[0-9a-f]+", log).group(0)
    key = re.search(r"sk_test_[A-Za-z0-9]+", log).group(0)
    admin = re.search(r"adm_[A-Za-z0-9]+", log).group(0)
    server.request("PATCH", f"/admin/accounts/{account}", admin,
                   {"rate_limit_per_minute": 0, "status_rate_limit_per_minute": 0})
    customer = server.request("POST", "/v1/customers", key,
                              {"email": "ana@example.co", "name": "Ana Gómez"})["id"]
    server.stop()
    database = os.path.join(work, "billing.db")
    started = time.monotonic()
    seed(database, account, customer, args.invoices, *CSV_MONTH, first_sequence=1)
    seed(database, account, customer, args.zip_invoices, *ZIP_MONTH,
         first_sequence=args.invoices + 1)
    print(f"seeded {args.invoices} + {args.zip_invoices} invoices in "
          f"{time.monotonic() - started:.1f} s ({work})")

    server.start()
    month = "%04d-%02d" % CSV_MONTH
    last = (datetime(CSV_MONTH[0], CSV_MONTH[1] % 12 + 1, 1) - timedelta(days=1)).date()
    out = os.path.join(work, "export.csv")
    elapsed, base, peak, hwm, size = measure(
        server, f"/v1/exports/invoices.csv?from={month}-01&to={last}", key, out)
    with open(out, newline="", encoding="utf-8") as f:
        rows = sum(1 for _ in f) - 1
    assert rows == args.invoices, (rows, args.invoices)
    print(f"CSV  {rows:>7} rows  {size / 2**20:8.1f} MiB in {elapsed:6.1f} s  "
          f"RSS before {base:6.1f} MiB, peak sampled {peak:6.1f} MiB, VmHWM {hwm:6.1f} MiB")
    server.stop()

    server.start()
    month = "%04d-%02d" % ZIP_MONTH
    out = os.path.join(work, "export.zip")
    elapsed, base, peak, hwm, size = measure(
        server, f"/v1/exports/documents.zip?month={month}", key, out)
    with zipfile.ZipFile(out) as archive:
        names = archive.namelist()
        assert all(archive.read(n).startswith(b"%PDF") for n in names[:10] + names[-10:])
    assert len(names) == args.zip_invoices, (len(names), args.zip_invoices)
    print(f"ZIP  {len(names):>7} PDFs  {size / 2**20:8.1f} MiB in {elapsed:6.1f} s  "
          f"RSS before {base:6.1f} MiB, peak sampled {peak:6.1f} MiB, VmHWM {hwm:6.1f} MiB")
    server.stop()


if __name__ == "__main__":
    main()
