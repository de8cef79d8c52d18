#!/usr/bin/env python3
"""Throughput of a running engine at 1 and N concurrent clients, and how often batching changes the greedy
tokens (docs/refengine.md, "Batched serving"; bench/gpu_vllm_shape.sh).

    vshape_load.py --port P [--clients 1,64] [--max-tokens 64] [--rounds 2] [--reference 16] [--repeat 5]

Each client sends `rounds` completions of max_tokens tokens, prompt "request <client> <round>", one after
the other; tokens/s = completion tokens of all clients / wall time. --repeat K measures each client count K
times (the later times with prompts of their own, so that no answer comes from a cache the first time
filled): tokens/s is then the median, with each measurement and their spread (min, max), which is what a
throughput is compared against (another start path's median inside cold's spread); requests,
completion_tokens and wall_s are then sums over the K measurements, each one's record in `each`. --reference R: the
first R prompts are first sent alone (batch 1), and their answers under load (the first measurement) are
compared token by token. One JSON object on stdout.
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request


def complete(port, prompt, max_tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)["choices"][0]["token_ids"]


def run(port, clients, rounds, max_tokens, tag=""):
    answers, errors = {}, []

    def client(c):
        for r in range(rounds):
            p = f"request {c} {r}{tag}"
            try:
                answers[p] = complete(port, p, max_tokens)
            except Exception as e:  # noqa: BLE001 -- counted and reported
                errors.append(f"{p}: {e}")

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t
    toks = sum(len(a) for a in answers.values())
    return {"clients": clients, "requests": len(answers), "errors": len(errors), "first_error": errors[:1],
            "completion_tokens": toks, "wall_s": round(wall, 4), "tokens_per_s": round(toks / wall, 1)}, answers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--clients", default="1,64")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reference", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("--repeat: at least 1")
    out = {"max_tokens": a.max_tokens, "rounds": a.rounds, "repeat": a.repeat, "runs": []}
    ref = {}
    for c in range(a.reference):
        p = f"request {c} 0"
        ref[p] = complete(a.port, p, a.max_tokens)
    for n in (int(x) for x in a.clients.split(",")):
        res, answers = run(a.port, n, a.rounds, a.max_tokens)
        if a.repeat > 1:
            each = [res] + [run(a.port, n, a.rounds, a.max_tokens, f" #{k}")[0] for k in range(1, a.repeat)]
            tps = [x["tokens_per_s"] for x in each]
            # requests, completion_tokens and wall_s are the sums over the K runs (one run's alone would
            # read as the whole); each run's own record is in `each`
            res = dict(res, tokens_per_s=round(statistics.median(tps), 1), tokens_per_s_each=tps,
                       spread={"min": min(tps), "max": max(tps)}, errors=sum(x["errors"] for x in each),
                       first_error=next((x["first_error"] for x in each if x["first_error"]), []),
                       requests=sum(x["requests"] for x in each),
                       completion_tokens=sum(x["completion_tokens"] for x in each),
                       wall_s=round(sum(x["wall_s"] for x in each), 4), each=each)
        compared = [p for p in ref if p in answers]
        differ = [p for p in compared if answers[p] != ref[p]]
        res.update(compared_with_batch1=len(compared), differ_from_batch1=len(differ),
                   differing_tokens=sum(sum(x != y for x, y in zip(answers[p], ref[p])) for p in differ))
        out["runs"].append(res)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
