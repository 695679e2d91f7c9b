"""Test-wide setup: keep every test's dashboard state out of the repository's runs/ folder."""
import os
import shutil
import tempfile

import pytest

from trainer.rules import roots as _roots

# Set before any test imports mmcore, so a JobStore() without a path lands in a throwaway folder. Each
# pytest-xdist worker gets its own (they inherit the controller's environment): tests count the jobs and
# the audit entries of their home, which another worker's tests would change under them.
_OWN_HOME = "MINIMIND_TEST_OWN_HOME"  # the home this file made, not one the caller chose
# The run's own temporary folder (made by the controller, shared by its xdist workers and every child process):
# the tests' data, weights and records go there, and it, not all of /tmp, is a read and write root, so the pages'
# scans (the Models catalogue walks the write roots) never meet what other programs leave in /tmp.
_RUN_TMP = "MINIMIND_TEST_RUN_TMP"
_made_run_tmp = not os.path.isdir(os.environ.get(_RUN_TMP, ""))
if _made_run_tmp:
    os.environ[_RUN_TMP] = tempfile.mkdtemp(prefix="minimind-tests-")
os.environ["TMPDIR"] = tempfile.tempdir = os.environ[_RUN_TMP]
if "MINIMIND_DASHBOARD_HOME" not in os.environ or (
        os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(_OWN_HOME) == os.environ["MINIMIND_DASHBOARD_HOME"]):
    os.environ["MINIMIND_DASHBOARD_HOME"] = os.environ[_OWN_HOME] = tempfile.mkdtemp(prefix="minimind-test-home-")
_defaults = _roots.default_roots()
_tmp = os.path.realpath(tempfile.gettempdir())
# Jobs may use the run's temporary folder too (tests keep their data, weights and records there), beside
# the default roots; tests of the roots themselves set these variables as they need.
os.environ.setdefault(_roots.READ_ENV, os.pathsep.join([*map(str, _defaults.read), _tmp]))
os.environ.setdefault(_roots.WRITE_ENV, os.pathsep.join([*map(str, _defaults.write), _tmp]))
# Two cores: keep torch from oversubscribing them when several test processes run trainers.
os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory):
    """Tiny reason_64.pth and grpo_64.pth trained by the real trainers, attributed to jobs in the test store
    (see _models_helpers); trained once per run, shared by every test and every parallel worker that needs them."""
    from _models_helpers import shared_demo_models

    from mmcore.jobs.jobstore import JobStore
    return shared_demo_models(run_temp(tmp_path_factory) / "demo-models", JobStore())


def run_temp(tmp_path_factory):
    """The temporary folder of the whole run: the base temp, or under pytest-xdist its parent, which every
    worker's base temp shares."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


# The tiers (pytest.ini's markers), given here by what a test needs so that a new test gets one without edits:
# `pytest -m fast` on every change, the whole suite (parallel: `pytest -n 3`) before a landing. See docs/TESTING.md.
SLOW_TIMEOUT_S = 120  # a test that declares a longer timeout than this runs long processes: slow
SLOW_FIXTURES = {"demo_models"}  # built by real trainings
# Files whose tests run trainers or long-lived processes throughout, and single tests that take more than
# about 3 s on 2 quiet cores (`pytest --durations=0`: trainers, fresh interpreters, model runs; docs/TESTING.md).
SLOW_FILES = {"test_ddp.py", "test_evaluate.py", "test_models_roles.py", "test_page_models.py", "test_resume.py",
              "test_rl_records.py", "test_rl_trainers.py", "test_stop_tree.py", "test_tokenizer_path.py",
              "test_trainers.py", "test_queue_processes.py", "test_queue_recovery.py", "test_acts_table.py",
              "test_packing_types.py", "test_export_formats.py", "test_chat_worker.py"}
SLOW_TESTS = {
    "test_api.py": {"test_cli_submit_status_list_and_refusals"},
    "test_chat_worker.py": {"test_worker_streams_the_same_greedy_tokens_as_generate"},
    "test_data.py": {"test_cli_data_check_json_and_exit_codes"},
    "test_decode_work.py": {"test_every_decode_path_gives_the_same_samples"},
    "test_export.py": {"test_export_refuses_what_is_not_a_minimind_state_dict",
                       "test_export_reloads_in_a_fresh_process_with_the_same_logits_and_tokens"},
    "test_full_disk.py": {"test_a_job_that_fills_a_tmpfs_home_is_failed_no_space_not_lost"},
    "test_fuzz_forms.py": {"test_fuzz_form_values"},
    "test_held_out_batched.py": {"test_batched_greedy_answers_are_each_prompts_own_greedy_answer"},
    "test_i18n.py": {"test_every_page_in_chinese_has_no_english_left", "test_the_trainers_print_the_english_messages"},
    "test_imports.py": {"test_every_dashboard_module_imports_alone_without_torch",
                        "test_the_import_check_sees_a_module_that_leans_on_another"},
    "test_logparse.py": {"test_log_of_a_real_pretrain_job"},
    "test_model.py": {"test_aux_loss_positive_for_moe_in_training_and_zero_for_dense",
                      "test_cached_greedy_generation_equals_recomputation", "test_logits_to_keep",
                      "test_right_padding_leaves_real_tokens_unchanged"},
    "test_moe_aux.py": {"test_moe_aux_loss_counts_the_positions_upstream_pads_to"},
    "test_package.py": {"test_minimind_is_python_m_mmcore"},
    "test_packing.py": {"test_attention_stays_within_each_document", "test_document_attention_across_chunks_and_rows",
                        "test_loss_only_equals_the_loss_over_full_logits",
                        "test_loss_only_on_full_and_packed_rows_equals_the_full_logits_loss"},
    "test_page_data.py": {"test_a_file_has_one_format_whatever_type_checks_it",
                          "test_bad_file_lists_problems_and_refuses_bad_input", "test_data_page_in_chinese",
                          "test_demo_dpo_file_health_mask_and_sizes", "test_train_on_this_file_fills_the_train_form"},
    "test_page_records.py": {"test_two_runs_side_by_side_and_x_axes"},
    "test_page_train.py": {"test_launching_a_demo_pretrain_job_runs_it"},
    "test_progress.py": {"test_many_finished_jobs_cost_one_parse_each"},
    "test_queue_api.py": {"test_cli_submit_takes_backend_and_gpus_and_status_shows_them",
                          "test_queue_listing_moves_and_priorities_from_the_cli"},
    "test_read_limits.py": {"test_a_row_nested_200000_deep_is_a_clear_message_not_a_traceback",
                            "test_leftovers_of_a_killed_worker_are_removed_by_the_next_start"},
    "test_roots.py": {"test_a_trainer_started_by_the_dashboard_refuses_paths_outside_the_roots"},
    "test_runs.py": {"test_two_tiny_real_jobs_runs_json_and_diff_json"},
    "test_sampling.py": {"test_compiled_decode_step_and_autocast_run_on_cpu", "test_greedy_stops_at_eos_like_generate",
                         "test_sampled_token_frequencies_match_generate"},
    "test_security_doc.py": {"test_the_file_modes_table_holds_on_a_live_home"},
    "test_store.py": {"test_concurrent_writers_lose_no_row"},
    "test_write_roots.py": {"test_an_import_inside_the_root_writes_where_it_was_checked"},
}


# The browser tests run on two workers, each one Chromium and one Streamlit server at a time: these files on
# one, the others on the second (about half the browser tier's time each, by `pytest --durations=0`).
BROWSER_FIRST = {"test_browser_live.py", "test_browser_e2e.py", "test_browser_pipeline.py", "test_browser_walk.py",
                 "test_browser_signin.py", "test_browser_runs.py", "test_browser_restart.py"}


def tier_of(item):
    """browser, slurm, llama_cpp, slow or fast: the first that fits."""
    name = item.path.name
    if name.startswith("test_browser_") or item.get_closest_marker("browser"):
        return "browser"
    if name == "test_slurm.py" or item.get_closest_marker("slurm"):
        return "slurm"
    if item.get_closest_marker("llama_cpp"):
        return "llama_cpp"
    timeout = item.get_closest_marker("timeout")
    declared = timeout.args[0] if timeout and timeout.args else (timeout.kwargs.get("timeout", 0) if timeout else 0)
    if (item.get_closest_marker("slow") or name in SLOW_FILES or declared > SLOW_TIMEOUT_S
            or getattr(item, "originalname", item.name) in SLOW_TESTS.get(name, ())
            or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))):
        return "slow"
    return "fast"


def pytest_sessionfinish(session, exitstatus):
    """A passing run's temporary folder is removed by the process that made it; a failing run's stays to be read."""
    if _made_run_tmp and exitstatus == 0:
        shutil.rmtree(os.environ[_RUN_TMP], ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier. Under pytest-xdist (`--dist loadgroup`), the browser tests share two
    workers (see BROWSER_FIRST), the Slurm tests another, and a slow file's tests stay together (its module
    fixtures are built once); the long groups are handed out first."""
    order = {"browser": 0, "slurm": 1, "llama_cpp": 2, "slow": 3, "fast": 4}
    for item in items:
        tier = tier_of(item)
        item.add_marker(tier)
        if tier == "browser":
            item.add_marker(pytest.mark.xdist_group("browser" if item.path.name in BROWSER_FIRST else "browser-2"))
        elif tier == "slurm":
            item.add_marker(pytest.mark.xdist_group(tier))
        elif tier in ("slow", "llama_cpp"):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
        item.stash[TIER] = order[tier]
    if hasattr(config, "workerinput"):  # the same order in every worker, as xdist requires
        items.sort(key=lambda item: item.stash[TIER])


TIER = pytest.StashKey[int]()
