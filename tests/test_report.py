"""make report (python -m reporting): a PDF built from small real runs, read back and rendered."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from pypdf import PdfReader

from conftest import REPO, missing, pdf_text, without_spaces
from harness import experiments
from reporting import blocks, correctness, palette

VERIFY_RUNS = ["reference", "tf", "horovod", "tf-async"]


@pytest.fixture(scope="module")
def verified(verify_run):
    """The results directory of the session's make verify (conftest.verify_run)."""
    work, result = verify_run
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return work / "results"


def make_report(results_dir, out_dir):
    return subprocess.run([sys.executable, "-m", "reporting", f"--results_dir={results_dir}", f"--out_dir={out_dir}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def summary(results_dir, name):
    return json.loads((results_dir / f"verify-{name}.json").read_text())


def bench_lines(results_dir):
    """bench.jsonl as make bench writes it (bench/run.py): per benchmarked run the cluster's shape, the timer's
    throughput fields (here the verify runs' real ones, scaled as if each scaled at 80% efficiency), each machine's
    bytes per step counted and predicted, and the point estimate of the step; plus a run the bench skipped."""
    lines = []
    one_device = summary(results_dir, "tf")["throughput"]["median"]  # bench measures it once per config
    for verify_name, runner in [("tf", "tf"), ("horovod", "horovod"), ("tf-async", "tf-async")]:
        measured = summary(results_dir, verify_name)
        for workers in (1, 2):
            throughput = scaled(measured["throughput"], workers * 0.8 ** (workers - 1))
            step = throughput["median_step_seconds"]
            per_machine = [{"sent": 1.1e6 * workers, "received": 1.2e6 * workers}] * workers
            lines.append({"runner": runner, "architecture": "tf" if "tf" in runner else "horovod",
                          "config": "tiny", "workers": workers, "ps": workers, "machines": workers,
                          "link": "100mbit", "bits_per_second": 100_000_000, "repeat": 1,
                          "compute_seconds_one_device": step / 3,
                          "run_name": f"bench-tiny-{runner}-w{workers}-r1", "throughput": throughput,
                          "predicted_bytes_per_step": [{"sent": 1e6 * workers, "received": 1e6 * workers}] * workers,
                          "measured_bytes_per_step": per_machine, "compute_seconds": step / 3,
                          "network_seconds": step / 2, "point_seconds": step * 5 / 6,
                          # tf's step inside the model's interval, horovod's above it
                          "lower_seconds": step / 2, "upper_seconds": step * (1.1 if runner == "tf" else 0.9),
                          "one_device_words_per_sec": one_device,
                          "step_over_point": 1.2, "environment": measured["environment"]})
            if runner == "tf-async":  # outside the model, as bench/run.py records it
                lines[-1].update(compute_seconds=None, network_seconds=None, point_seconds=None,
                                 lower_seconds=None, upper_seconds=None, step_over_point=None,
                                 outside_the_model="asynchronous: ...")
    lines.append({"runner": "horovod-dense", "architecture": "horovod", "config": "tiny", "workers": 4, "ps": 4,
                  "machines": 4, "link": "100mbit", "repeat": 1, "compute_seconds_one_device": 0.1,
                  "predicted_bytes_per_step": [{"sent": 2.1e8, "received": 2.1e8}] * 4, "skipped": "its point estimate is 9.0 s a step, 15 minutes for 100 steps (--max_run_seconds=900)"})
    return lines


def scaled(throughput, factor):
    """The timer's fields of a run `factor` times as fast."""
    rates = {key: throughput[key] * factor for key in ("median", "p16", "p84", "mean", "aggregate")}
    return dict(throughput, **rates, ci95=[bound * factor for bound in throughput["ci95"]],
                median_step_seconds=throughput["median_step_seconds"] / factor)


def prediction_lines():
    return [{"runner": runner, "config": "tiny", "workers": workers, "machines": workers, "link": "100mbit",
             "words_per_sec": speed * workers ** 0.8}
            for runner, speed in [("tf", 900.0), ("horovod", 600.0), ("parallax", 1500.0)]
            for workers in (2, 4, 8, 16, 32, 48)]


def parallax_lines():
    return [{"architecture": architecture, "machines": machines, "predicted_words_per_sec": 40_000.0 * machines,
             "published_words_per_sec": 50_000.0 * machines + offset, "bytes_only_words_per_sec": 90_000.0 * machines}
            for offset, architecture in enumerate(("ps", "allreduce", "hybrid")) for machines in (1, 2, 4, 8)]


# The crossover sweep's words/sec, (measured, model) at W = 2, 4, 6: the hybrid overtakes allgather at W = 4
# measured and at W = 2 by the model.
CROSSOVER = {"horovod": {2: (1000.0, 1100.0), 4: (1200.0, 1250.0), 6: (1300.0, 1350.0)},
             "parallax": {2: (900.0, 1150.0), 4: (1500.0, 1600.0), 6: (2000.0, 2100.0)}}


def crossover_lines(results_dir):
    """bench-crossover.jsonl as bench.run --crossover writes it, with the verify runs' real throughput fields
    scaled to CROSSOVER's words/sec and each run's point estimate set to give the model's."""
    measured = summary(results_dir, "horovod")["throughput"]
    return [{"runner": runner, "architecture": runner, "config": "tiny", "workers": w, "ps": w, "machines": w,
             "link": "100mbit", "repeat": 1, "compute_seconds_one_device": 0.1, "batch_size": 4 * w,
             "words_per_step": 20.0 * w, "predicted_bytes_per_step": [{"sent": 1e6, "received": 1e6}] * w,
             "measured_bytes_per_step": [{"sent": 1e6, "received": 1e6}] * w,
             "throughput": scaled(measured, rate / measured["median"]), "compute_seconds": 0.01,
             "network_seconds": 0.01, "point_seconds": 20.0 * w / model, "tasks_peak_resident_bytes": w * 2**30}
            for runner, points in CROSSOVER.items() for w, (rate, model) in points.items()]


def write_lines(path, records):
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


@pytest.fixture(scope="module")
def without_bench(verified, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    result = make_report(verified, out)
    assert result.returncode == 0, result.stderr
    return out / "report.pdf"


@pytest.fixture(scope="module")
def with_bench(verified, tmp_path_factory):
    results = tmp_path_factory.mktemp("bench-results")
    shutil.copytree(verified, results, dirs_exist_ok=True)
    write_lines(results / "bench.jsonl", bench_lines(verified))
    write_lines(results / "bench-predict.jsonl", prediction_lines())
    write_lines(results / "bench-parallax.jsonl", parallax_lines())
    write_lines(results / "bench-crossover.jsonl", crossover_lines(verified))
    # A run of a config this test does not know, with a field the others lack: the report takes configs from
    # the summaries, whatever they are.
    other = dict(summary(verified, "reference"), run_name="other-config")
    other["config"] = dict(other["config"], name="lm1b-like", num_sampled=64)
    other["update_rule"] = "Adagrad(initial_accumulator=1.0); the global norm of lstm_0/kernel clipped to 10"
    (results / "other-config.json").write_text(json.dumps(other))
    out = tmp_path_factory.mktemp("bench-report")
    result = make_report(results, out)
    assert result.returncode == 0, result.stderr
    return out / "report.pdf", results


def test_report_states_the_verdicts_and_the_measured_figures(verified, without_bench):
    text = pdf_text(without_bench)
    verify = json.loads((verified / "verify.json").read_text())
    assert "verify PASSED" in text
    for pair in verify["pairs"]:
        assert f"{pair['a']} {pair['b']} {blocks.small(pair['max_abs_diff'])}" in text
        assert pair["verdict"] in text
    assert "asynchronous updates are applied to whatever the variables hold" in text  # the recorded cause
    staleness = summary(verified, "tf-async")["staleness"]
    assert f"on average {staleness['chief_mean']:.2f} updates stale" in text
    for name in VERIFY_RUNS:
        run = summary(verified, name)
        t = run["throughput"]
        row = f"{name} {blocks.rate(t['median'])} {blocks.interval(t['p16'], t['p84'])}"
        assert without_spaces(row) in without_spaces(text)
        assert blocks.loss(run["final_loss"]) in text
        assert run["environment"]["cpu_model"] in text
    assert "equal at every step" in text  # the synchronous runs' losses coincide with the reference's
    assert "Zaremba" in text and "arXiv:1409.2329" in text


def test_many_differing_variables_are_counted_by_layer_and_few_are_named():
    """At W = 4 a model of layer paths differs in dozens of variables per pair: the report counts them by top-level
    layer (verify.json names each); a handful it names."""
    many = {"differing_variables": [f"encoder/block_{i}/kernel" for i in range(10)] + ["decoder/dense/kernel",
                                                                                       "embedding"]}
    assert correctness.differing_variables(many, 40) == "12 of 40, in encoder (10), decoder (1), embedding (1); " \
                                                        "each named in verify.json"
    assert correctness.differing_variables({"differing_variables": ["softmax_b", "softmax_w"]}, 40) == \
        "softmax_b, softmax_w"


def test_results_without_bench_say_so(without_bench):
    text = pdf_text(without_bench)
    assert "bench not run: make bench" in text
    assert "Parallax's figure not predicted: make bench" in text
    assert "crossover sweep not run: make bench BENCH=crossover" in text


def test_bench_results_are_tabled_plotted_and_discussed(verified, with_bench):
    # each config's own update rule, as its summaries record it
    text = without_spaces(pdf_text(with_bench[0]))
    for rule in ("SGD(); the global norm of every gradient clipped to 5", "Adagrad(initial_accumulator=1.0)"):
        assert without_spaces(rule) in text
    pdf, results = with_bench
    text = pdf_text(pdf)
    cells = without_spaces(text)
    assert "bench not run" not in text
    for line in bench_lines(verified):
        if "skipped" in line:
            assert without_spaces(f"skipped by make bench: horovod-dense, tiny, 4 workers, repeat 1: "
                                  f"{line['skipped']}") in cells
        else:
            row = (f"{palette.key(line['runner'])} tiny {line['workers']} {line['ps']} {line['machines']} 100mbit 1 "
                   f"{blocks.rate(line['throughput']['median'])} "
                   f"{blocks.interval(line['throughput']['p16'], line['throughput']['p84'])}")
            assert without_spaces(row) in cells
    # the discussion ranks what the model explains, with its terms, names what it does not, and scales against
    # one device
    tf = next(line for line in bench_lines(verified) if line["runner"] == "tf" and line["workers"] == 2)
    assert without_spaces(f"tiny config, 100mbit links, 2 workers. Fastest, of the runs the model explains: "
                          f"tf ({blocks.rate(tf['throughput']['median'])} words/sec). By the model it is "
                          f"{'network' if tf['network_seconds'] > tf['compute_seconds'] else 'compute'}-bound: a "
                          f"step of {blocks.seconds(tf['throughput']['median_step_seconds'])} measured, the network "
                          f"term {blocks.seconds(tf['network_seconds'])} of it") in cells
    assert without_spaces("The model does not explain horovod: its step") in cells
    assert without_spaces("Not ranked: tf-async, whose workers step at their own paces") in cells
    two = {line["runner"]: line["throughput"]["median"] / tf["one_device_words_per_sec"]
           for line in bench_lines(verified) if line["workers"] == 2}
    (low, slowest), (high, fastest) = min((v, k) for k, v in two.items()), max((v, k) for k, v in two.items())
    assert without_spaces(f"Against one device alone ({blocks.rate(tf['one_device_words_per_sec'])} words/sec), 2 "
                          f"workers reach {low:.2f}x ({slowest}) to {high:.2f}x ({fastest}) of its speed "
                          f"(linear: 2x)") in cells
    assert without_spaces("LM1B model on 48 GPUs: for tiny here a reference, not a check") in cells
    assert without_spaces("each bench figure one run;") in cells  # every bench line is repeat 1
    drawn = {path.name for path in (pdf.parent / "figures").iterdir()}
    assert {"bench-scaling-0.svg", "bench-model-0.svg", "bench-extrapolation.svg", "loss.svg"} <= drawn
    assert "Parallax's published speedups" in text
    assert "extrapolation not run" not in text
    assert "lm1b-like" in text and "num_sampled" in text
    # Parallax's twelve points: each row with its ratios, and the figure drawn
    for point in parallax_lines():
        predicted, published = point["predicted_words_per_sec"], point["published_words_per_sec"]
        assert (f"{point['architecture']} {point['machines']} {blocks.rate(predicted)} {blocks.rate(published)} "
                f"{predicted / published:.2f} {point['bytes_only_words_per_sec'] / published:.2f}") in text
    assert "bench-parallax.svg" in drawn and "Parallax's figure not predicted" not in text
    # the crossover sweep: each W's words/sec measured and by the model, their ratios, the memory; where it crosses
    for w in (2, 4, 6):
        (allgather, allgather_model), (hybrid, hybrid_model) = CROSSOVER["horovod"][w], CROSSOVER["parallax"][w]
        assert (f"{w} {blocks.rate(allgather)} {blocks.rate(allgather_model)} {blocks.rate(hybrid)} "
                f"{blocks.rate(hybrid_model)} {hybrid / allgather:.2f} {hybrid_model / allgather_model:.2f} "
                f"{w:.1f} {w:.1f}") in text
    assert ("Measured, the hybrid is faster than allgather from W = 4; by the model, from W = 2, the sweep's "
            "smallest.") in text
    assert "bench-crossover.svg" in drawn and "crossover sweep not run" not in text


def rendered_pages(pdf, out_dir):
    subprocess.run(["pdftoppm", "-r", "30", "-png", str(pdf), str(out_dir / "page")], check=True)
    return sorted(out_dir.glob("page-*.png"))


def test_every_page_renders_and_is_not_blank(without_bench, with_bench, tmp_path):
    if shutil.which("pdftoppm") is None:
        missing("pdftoppm missing: apt-get install poppler-utils")
    for index, pdf in enumerate([without_bench, with_bench[0]]):
        (tmp_path / str(index)).mkdir()
        pages = rendered_pages(pdf, tmp_path / str(index))
        assert len(pages) == len(PdfReader(pdf).pages) >= 3
        for page in pages:
            # At 30 dpi text is grey, not black. A page with only its number has about 0.05% of its pixels
            # inked; a page of text, 5%.
            ink = np.asarray(Image.open(page).convert("L")) < 200
            assert ink.mean() > 0.005, f"{page.name} of {pdf} is blank"


def test_a_corrupt_bench_line_is_one_error_naming_file_and_line(verified, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(verified, results)
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.pdf").write_text("an earlier report, of other results")
    good = json.dumps(bench_lines(verified)[0])
    for broken, why in [("{\"runner\": \"tf\", ", "not valid JSON"), ("[1, 2]", "not a JSON object"),
                        (json.dumps({"runner": "tf", "config": "tiny"}), "missing field 'workers'")]:
        (results / "bench.jsonl").write_text(f"{good}\n{broken}\n")
        result = make_report(results, tmp_path / "report")
        assert result.returncode == 2
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"python -m reporting: error: {results / 'bench.jsonl'}:2: ")
        assert why in lines[0] and "Traceback" not in result.stderr
        assert not (tmp_path / "report" / "report.pdf").exists()


def test_a_verify_json_of_another_shape_is_one_line(verified, tmp_path):
    results = tmp_path / "results"
    shutil.copytree(verified, results)
    verify = json.loads((results / "verify.json").read_text())
    del verify["pairs"][0]["verdict"]
    (results / "verify.json").write_text(json.dumps(verify))
    result = make_report(results, tmp_path / "report")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"python -m reporting: error: {results / 'verify.json'}: "
                                          "missing field 'verdict' in pairs[0]"]


def test_a_missing_results_directory_is_one_line(tmp_path, assert_usage_error):
    assert_usage_error(make_report(tmp_path / "nowhere", tmp_path / "report"), "nowhere")
    result = subprocess.run([sys.executable, "-m", "reporting", "--colour=red"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert_usage_error(result, "--colour: no such flag")


def test_a_run_has_one_colour_under_all_its_names():
    tf_blue, reference = experiments.RUNS["tf"].colour, experiments.RUNS["reference"].colour
    assert palette.colour("verify-tf") == palette.colour("run_tf.py") == palette.colour("run_tf") == tf_blue
    assert palette.colour("run.py") == palette.colour("verify-reference") == reference
    assert palette.colour("run_parallax") == palette.colour("verify-parallax") == experiments.RUNS["parallax"].colour
    assert len({palette.colour(name) for name in experiments.RUNS}) == len(experiments.RUNS)
    assert palette.colour("lm1b-thing") in palette.SPARE  # a run the registry does not know: a spare colour

def test_several_models_read_as_one_document_each_described_as_it_is(verified, tmp_path):
    """Two models: a title and a comparison across them first; a model whose every gradient is dense (its
    embedding tied: looked up, and read whole) is described so, with no sparse gradient to allgather."""
    results = tmp_path / "results"
    shutil.copytree(verified, results / "lstm")
    shutil.copytree(verified, results / "gru")
    for path in (results / "gru").glob("verify-*.json"):
        record = json.loads(path.read_text())
        for variable in record.get("variables", {}).values():
            variable["kind"] = "dense"
        path.write_text(json.dumps(record))
    result = make_report(results, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    text = " ".join(pdf_text(tmp_path / "out/report.pdf").split())
    assert text.startswith("2 models, four ways to train each") and "1. The models compared" in text
    assert "gru tiny" in text and "lstm tiny" in text and "PASSED, W = 2" in text
    dense = text[text.index("gru: How each architecture"):]
    sparse = text[text.index("lstm: How each architecture"):]
    assert ("every gradient of this model is dense (embedding: looked up by rows, but also read whole" in dense
            and "no sparse variable" in dense and "the sparse gradient of" not in dense[:3000])
    assert "the sparse gradient of embedding is allgathered" in sparse


def test_the_environment_names_every_host_the_launcher_recorded(verified, tmp_path):
    """A run whose tasks ran on two hosts (its hosts.json, as the launcher writes it across nodes): a column for
    each host's machine, beside this machine's for the other runs."""
    results = tmp_path / "results"
    shutil.copytree(verified, results)
    own = json.loads((results / "verify-tf.hosts.json").read_text())["hosts"][0]["environment"]
    hosts = [{"host": name, "tasks": tasks, "environment": {**own, "hostname": name, "cpu_model": f"{name}'s CPU"}}
             for name, tasks in (("node1", ["worker0", "ps0"]), ("node2", ["worker1"]))]
    (results / "verify-tf.hosts.json").write_text(json.dumps({"run": "verify-tf", "hosts": hosts}))
    result = make_report(results, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    text = pdf_text(tmp_path / "out/report.pdf")
    section = text[text.index("Environment Where the measured runs ran"):text.index("How each architecture")]
    assert "node1 node2" in section and "node1's CPU node2's CPU" in section, section
    assert own["cpu_model"] in section  # the other runs, on this machine
