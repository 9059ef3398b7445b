"""Diagnosis: config diff against a reference run, bottleneck rules with evidence, performance model.

Three tools, used in this order by the workbook:

* :func:`diff_configs` lines up two server configurations (ServerConfig objects, server-args
  dicts, config.json files, SGLang logs, or shipped reference names) and ranks every difference
  by how much that argument can move throughput for a high-concurrency decode workload, using
  the impact table in ``data/knowledge/impact.json``.
* :func:`diagnose` reads a run folder (server log, sweep results, per-request records, GPU
  telemetry, environment snapshot) and applies rules, each a function of an :class:`Evidence`
  bundle of tidy DataFrames, so every rule can be checked on frames built by hand. Findings
  carry evidence strings that quote the numbers they rest on.
* :class:`PerfModel` (:mod:`.model`) is the one performance model: fitted on one phase, it
  forecasts a change's throughput and latencies with a band, names the limit that binds (the
  batch, the step with its CUDA-graph ceiling, the serving front end), gives the running cap the KV
  pool supports (:func:`recommend_running_cap`) and what every finding's remedy should give.

Known flag/hardware incompatibilities live in ``data/knowledge/incompatibilities.json`` and are
checked against the environment snapshot; users can add their own entries there.

Modules: :mod:`.knowledge` (the data files), :mod:`.references` (resolving configurations),
:mod:`.diff`, :mod:`.evidence` (Evidence, Finding, load_evidence; each level's scheduler figures
from the denser of the log and ``/metrics``), :mod:`.rules` (one module per theme: the running
batch, admission, per-step limits, throughput and the client, trade-offs between phases, ...),
:mod:`.model`, :mod:`.prediction` (forecast beside measurement), :mod:`.runs` (diagnose a run folder), :mod:`.section` (the report's scheduler
limits section).
"""

from __future__ import annotations

from glm5lib.diagnose import rules as _rules
from glm5lib.diagnose.diff import DIFF_COLUMNS, diff_configs, resolve_automatic
from glm5lib.diagnose.evidence import FINDING_COLUMNS, Evidence, Finding, Prediction, load_evidence
from glm5lib.diagnose.knowledge import (
    fill_remedy,
    load_impact,
    load_incompatibilities,
    load_remedies,
    remedy,
)
from glm5lib.diagnose.model import (
    Forecast,
    PerfModel,
    Recommendation,
    predict,
    predict_remedy,
    recommend_running_cap,
)
from glm5lib.diagnose.references import (
    list_references,
    reference_dir,
    resolve_config,
    resolve_server_args,
)
from glm5lib.diagnose.rules import (  # noqa: F401  (re-exported: __all__ below extends rules.__all__)
    CAVEAT_RULES,
    RULES,
    evaluate,
    rule_admission_reserve,
    rule_client_bound,
    rule_concurrency_cap,
    rule_crashes,
    rule_cuda_graph,
    rule_dp_imbalance,
    rule_gpu_underused,
    rule_incompatibilities,
    rule_kv_capacity,
    rule_load_bound,
    rule_prefill_budget,
    rule_prefill_graph,
    rule_reference_diff,
    rule_retraction_churn,
    rule_saturation,
    rule_token_budget,
    rule_tradeoff,
    rule_underfed,
)
from glm5lib.diagnose.runs import diagnose

# Every rule is re-exported by name: rules.__all__ is the one list of them.
__all__ = [
    "DIFF_COLUMNS",
    "FINDING_COLUMNS",
    "Evidence",
    "Finding",
    "Forecast",
    "PerfModel",
    "Prediction",
    "Recommendation",
    "diagnose",
    "diff_configs",
    "fill_remedy",
    "list_references",
    "load_evidence",
    "load_impact",
    "load_incompatibilities",
    "load_remedies",
    "predict",
    "predict_remedy",
    "recommend_running_cap",
    "reference_dir",
    "remedy",
    "resolve_automatic",
    "resolve_config",
    "resolve_server_args",
]
__all__ += _rules.__all__
