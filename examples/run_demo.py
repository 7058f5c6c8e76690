#!/usr/bin/python3
"""The README's demo: a MongoDB stand-in, flowwarden running examples/orders.lua,
and a client that inserts, updates and deletes orders. Prints what the handlers
did, the read model they wrote with fw.mongo and the dead-letter entries. Then
kills flowwarden with kill -9 in the middle of 200 more orders, starts it again
and checks every customer's total against the orders (exactly_once = true):
exits 1 if one is off."""
import argparse
import os
import queue
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "standin"))

from standin_process import StandIn  # noqa: E402
import pymongo  # noqa: E402


CUSTOMERS = ("ada", "bob", "cy", "dee")
MORE = 200


def pump(stream, lines, quiet=lambda line: False):
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if not quiet(line):
            print("  flowwarden | " + line, flush=True)
        lines.put(line)


def start(binary, uri, quiet=lambda line: False):
    proc = subprocess.Popen([binary, "run", os.path.join(HERE, "orders.lua"), "--uri", uri],
                            stderr=subprocess.PIPE)
    lines, seen = queue.Queue(), []
    threading.Thread(target=pump, args=(proc.stderr, lines, quiet), daemon=True).start()
    if not wait_for(lines, seen, "change stream open", 30):
        proc.kill()
        sys.exit("demo: flowwarden did not open its change stream")
    return proc


def counted(db):
    return sum(t["orders"] for t in db.customer_totals.find())


def totals(db):
    return {t["_id"]: (t["orders"], round(t["amount"], 2)) for t in db.customer_totals.find()}


def expected(before, new_orders):
    """The totals before, plus the new orders (all accepted)."""
    want = dict(before)
    for o in new_orders:
        n, amount = want.get(o["customer"], (0, 0.0))
        want[o["customer"]] = (n + 1, round(amount + o["total"], 2))
    return want


def crash_in_the_middle(binary, uri, db):
    """kill -9 while 200 orders flow, a restart, then every total checked."""
    print("\nclient: 200 more orders; flowwarden is killed (kill -9) in the middle")
    quiet = lambda line: "accepted" in line  # noqa: E731  (200 lines say nothing new)
    proc = start(binary, uri, quiet)
    base, before = counted(db), totals(db)
    new_orders = [{"_id": 100 + i, "item": "pen", "qty": 1, "total": 1.5, "gateway": "ok",
                   "customer": CUSTOMERS[i % len(CUSTOMERS)]} for i in range(MORE)]

    def write():
        for o in new_orders:
            db.orders.insert_one(o)
    writer = threading.Thread(target=write)
    writer.start()
    deadline = time.monotonic() + 60
    while counted(db) < base + MORE // 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.kill()
    proc.wait(timeout=30)
    print("demo: killed flowwarden (SIGKILL) with %d of the %d orders counted"
          % (counted(db) - base, MORE))
    writer.join()
    proc = start(binary, uri, quiet)
    deadline = time.monotonic() + 60
    try:
        while counted(db) < base + MORE and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    got, want = totals(db), expected(before, new_orders)
    print("\nread model after the crash and the restart (shop.customer_totals):")
    for c in sorted(set(got) | set(want)):
        print("  - customer=%s orders=%d amount=%.2f (expected: %d, %.2f)" % (
            c, got.get(c, (0, 0))[0], got.get(c, (0, 0))[1], want.get(c, (0, 0))[0],
            want.get(c, (0, 0))[1]))
    if got != want:
        print("demo: the totals are off")
        return 1
    print("every total exact: no order lost, none counted twice")
    return proc.returncode


def wait_for(lines, seen, needle, timeout):
    """Waits for a log line containing needle; returns False on timeout."""
    deadline = time.monotonic() + timeout
    if any(needle in l for l in seen):
        return True
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=deadline - time.monotonic())
        except queue.Empty:
            return False
        seen.append(line)
        if needle in line:
            return True
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "flowwarden"))
    args = ap.parse_args()

    with StandIn() as standin:
        uri = "mongodb://127.0.0.1:%d/shop?replicaSet=rs0" % standin.port
        print("stand-in ready at " + uri)
        proc = subprocess.Popen([args.binary, "run", os.path.join(HERE, "orders.lua"),
                                 "--uri", uri], stderr=subprocess.PIPE)
        lines, seen = queue.Queue(), []
        threading.Thread(target=pump, args=(proc.stderr, lines), daemon=True).start()
        try:
            if not wait_for(lines, seen, "change stream open", 30):
                sys.exit("demo: flowwarden did not open its change stream")
            client = pymongo.MongoClient(uri)
            orders = client.shop.orders
            print("client: inserting, updating and deleting orders")
            orders.insert_one({"_id": 1, "item": "keyboard", "qty": 1, "total": 49.90,
                               "gateway": "ok", "customer": "ada"})
            orders.insert_one({"_id": 2, "item": "monitor", "qty": 2, "total": 398.00,
                               "gateway": "flaky", "customer": "ada"})
            orders.insert_one({"_id": 3, "item": "cable", "qty": 3, "total": -5.00,
                               "gateway": "ok", "customer": "bob"})
            orders.insert_one({"_id": 4, "item": "laptop", "qty": 1, "total": 1299.00,
                               "gateway": "down", "customer": "bob"})
            orders.update_one({"_id": 1}, {"$set": {"status": "PAID"}})
            orders.delete_one({"_id": 1})
            if not wait_for(lines, seen, "order 1 was deleted", 60):
                sys.exit("demo: the handlers did not see every event")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        time.sleep(0)  # the pump thread drains the rest as the pipe closes
        print("\nflowwarden exited with status %d" % proc.returncode)

        print("\nread model written by the handler (shop.customer_totals):")
        for t in client.shop.customer_totals.find().sort("_id", 1):
            print("  - customer=%s orders=%d amount=%.2f" % (t["_id"], t["orders"], t["amount"]))

        print("\ndead-letter queue (shop.orders_dlq):")
        for e in client.shop.orders_dlq.find().sort("createdAt", 1):
            print("  - documentKey=%s operationType=%s attempts=%d error=%s: %s status=%s" % (
                e["documentKey"], e["operationType"], e["attempts"], e["error"]["type"],
                e["error"]["message"], e["status"]))
        if proc.returncode != 0:
            client.close()
            return proc.returncode
        rc = crash_in_the_middle(args.binary, uri, client.shop)
        client.close()
        return rc


if __name__ == "__main__":
    sys.exit(main())
