#!/usr/bin/env python3
"""bench/gpu_bench.py's plan, on the CPU: the GPU bench runs only on a lent GPU machine, so its
order, its budget rules and its reports are checked here against stand-ins for wick, the hand
loop and python (this folder), which write what the bench reads and log each call.

    python3 tests/gpu_bench/test_gpu_bench.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "gpu_bench.py")
GPT_ROWS = ["pytorch", "wick", "wick cuda_graph", "wick, LibTorch's kernels", "pytorch compile"]


def bench(tmp, *extra, fail=()):
    """gpu_bench.py on the stand-ins, one round; (exit code, the calls, bench.json, bench.md,
    its log)."""
    out, log = os.path.join(tmp, "out"), os.path.join(tmp, "calls.log")
    os.makedirs(out)
    env = {**os.environ, "STAND_IN_LOG": log, "STAND_IN_FAIL": ",".join(fail)}
    r = subprocess.run([sys.executable, BENCH, "--wick", os.path.join(HERE, "wick"), "--python",
                        os.path.join(HERE, "python"), "--out", out, "--work",
                        os.path.join(tmp, "work"), "--rounds", "1", "--budget-s", "300", *extra],
                       capture_output=True, text=True, env=env)
    if not os.path.exists(os.path.join(out, "bench.json")):
        raise AssertionError(f"no bench.json; exit {r.returncode}\n{r.stderr[-3000:]}")
    calls = []  # no log: nothing ran
    if os.path.exists(log):
        with open(log) as f:
            calls = f.read().splitlines()
    with open(os.path.join(out, "bench.json")) as f:
        result = json.load(f)
    with open(os.path.join(out, "bench.md")) as f:
        md = f.read()
    return r.returncode, calls, result, md, r.stderr


def gpt_rows(result):
    return {row["row"]: row for row in result["gpt2"]["rows"]}


class GpuBenchPlan(unittest.TestCase):
    def test_every_row_in_order_with_the_compile_row_last(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, calls, result, md, log = bench(tmp, "--compile-reserve-s", "0")
        self.assertEqual(code, 0, md)
        # 8 rows for each of the MLP and the CNN, then the GPT rows and the profiles.
        self.assertEqual(len(result["rows"]), 16)
        self.assertTrue(all(r["samples_per_s"] for r in result["rows"]), result["rows"])
        # wick's rows are timed past their set-up, from the step records (as the peers time
        # themselves past their first step); summary.json's whole-epoch rate is kept beside.
        mlp = result["rows"][0]
        self.assertEqual(mlp["row"], "wick fp32")
        self.assertAlmostEqual(mlp["samples_per_s"]["median"], 64000.0)
        self.assertEqual(mlp["whole_epoch_samples_per_s"]["median"], 50000.0)
        self.assertIsNone(result["rows"][6]["whole_epoch_samples_per_s"])  # the python loop
        self.assertIn("| mlp | wick fp32 | 64,000 | 64,000 | 64,000 |", md)
        self.assertIn("mlp libtorch loop: host us per call: add_ 5.0", log)
        # The CNN's fp32 rows leave channels_last out, as cnn.toml says for a GPU in fp32; its
        # bf16 row keeps it.
        cnn = [c for c in calls if c.startswith("wick cnn-")]
        self.assertEqual(len(cnn), 5, calls)
        for c in cnn:
            self.assertEqual(c.endswith(" nchw"), "-bf16-" not in c, c)
        self.assertEqual(calls[16:], [
            "python gpt2.py", "wick gpt2-wick.toml -", "wick gpt2-cuda_graph.toml -",
            "wick gpt2-libtorch_kernels.toml all", "wick gpt2-profile.toml -",
            "python gpt2.py --profile-kernels", "wick mlp-profile.toml -",
            "wick mlp-profile-cuda_graph.toml -", "python gpt2.py --compile"])
        rows = gpt_rows(result)
        self.assertEqual(list(rows), GPT_ROWS)
        self.assertTrue(all(r["tokens_per_s"] for r in rows.values()), rows)
        self.assertIn("make wick 1.00x itself with them hidden", md)

    def test_rows_before_the_compile_row_leave_it_its_reserve(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, calls, result, md, _ = bench(tmp, "--compile-reserve-s", "100000")
        self.assertEqual(code, 0, md)
        self.assertEqual(calls[16:], ["python gpt2.py", "wick gpt2-wick.toml -",
                                      "wick gpt2-cuda_graph.toml -", "python gpt2.py --compile"])
        rows = gpt_rows(result)
        self.assertIn("the compile row would have under 100000", rows[GPT_ROWS[3]]["skipped"])
        self.assertTrue(rows["pytorch compile"]["tokens_per_s"])

    def test_a_failed_wick_row_is_measured_again_with_libtorch_kernels(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, calls, result, md, _ = bench(tmp, "--compile-reserve-s", "100000",
                                            fail=("gpt2-wick.toml", "mlp-fp32-0.toml"))
        self.assertEqual(code, 1, md)
        # The MLP row again with WICK_CUDA_DISABLE=all, its number marked so.
        self.assertEqual(calls[:2], ["wick mlp-fp32-0.toml -", "wick mlp-fp32-0.toml all"])
        mlp = result["rows"][0]
        self.assertEqual((mlp["model"], mlp["row"]), ("mlp", "wick fp32"))
        self.assertTrue(mlp["libtorch_kernels"])
        self.assertAlmostEqual(mlp["samples_per_s"]["median"], 48000.0)
        self.assertEqual(mlp["whole_epoch_samples_per_s"]["median"], 40000.0)
        self.assertIn("| mlp | wick fp32 (failed; every round's number with WICK_CUDA_DISABLE=all)",
                      md)
        # The GPT row failed: the LibTorch-kernel row runs whatever the reserve, as wick's number.
        rows = gpt_rows(result)
        self.assertIn("illegal memory access", rows["wick"]["failed"])
        self.assertTrue(rows[GPT_ROWS[3]]["tokens_per_s"])
        self.assertIn("wick gpt2-libtorch_kernels.toml all", calls)

    def test_rows_with_no_budget_left_are_skipped_and_reported(self):
        with tempfile.TemporaryDirectory() as tmp:
            code, calls, result, md, _ = bench(tmp, "--budget-s", "10")
        self.assertEqual(code, 0, md)
        self.assertEqual(calls, [])
        self.assertTrue(all("budget left" in r["skipped"] for r in result["rows"]))
        self.assertTrue(all("budget left" in r["skipped"] for r in gpt_rows(result).values()))
        self.assertIn("| mlp | wick fp32 | skipped: ", md)


if __name__ == "__main__":
    unittest.main()
