"""The jobs table fits the page at 1400 px (issue 40: it was wider than the page): a long job name wraps
within a bounded column, and the "Submitted by" column shows only when the jobs have several submitters."""
import re

from mmcore.jobs import htmltable, jobtable

COLUMNS = ["id", "type", "name", "status", "submitted_by"]
HEADERS = {"id": "ID", "type": "Type", "name": "Name", "status": "Status", "submitted_by": "Submitted by"}


def test_the_submitter_column_shows_only_with_several_submitters():
    alone = [{"id": 1, "submitted_by": "ann@vm"}, {"id": 2, "submitted_by": "ann@vm"}]
    assert jobtable.shown_columns(alone, COLUMNS) == ["id", "type", "name", "status"]
    team = [{"id": 1, "submitted_by": "ann@vm"}, {"id": 2, "submitted_by": "bob@gpu-1"}]
    assert jobtable.shown_columns(team, COLUMNS) == COLUMNS
    assert jobtable.shown_columns(alone, ["id", "name"]) == ["id", "name"]


def test_a_long_name_wraps_in_a_bounded_column_and_keeps_its_text():
    name = "grpo-reasoning-from-the-demo-chain-" * 3
    rows = [{"id": 1, "type": "GRPO", "name": name, "status": "running", "submitted_by": "ann@vm"}]
    widths = htmltable.column_widths(rows, COLUMNS, HEADERS)
    assert widths["name"] == 22 < htmltable.text_width_ch(name)
    assert widths["status"] >= htmltable.text_width_ch("running")  # other columns still fit their text
    head, blocks = htmltable.table_parts(rows, COLUMNS, HEADERS)
    assert f'<span class="wrap">{name}</span>' in blocks[0]
    live, _sent = htmltable.table_message(rows, COLUMNS, HEADERS)
    assert f'<span class="wrap">{name}</span>' in live["html"]
    assert re.search(r"\.minimind-table \.wrap\{[^}]*white-space:normal[^}]*max-width:22ch", live["html"])
