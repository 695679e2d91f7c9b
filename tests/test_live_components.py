"""The fed components' shared part (mmcore/live/components/receiver.js) goes before each component's own code,
inline (`livepage.script`) or published as one file of the static folder (`livepage.bundle`), and the joined
code works: run under Node with a stand-in element, a log tail draws, takes a feed's message through its
receiver, and asks for a draw ("lost") once for a message that does not follow."""
import json
import shutil
import subprocess

import pytest

from mmcore.live import livepage, livetable


def test_a_bundle_is_published_as_one_file_named_by_all_its_parts(tmp_path):
    shared, own = tmp_path / "shared.js", tmp_path / "own.js"
    shared.write_text("function helper() {}\n")
    own.write_text("export default helper;\n")
    name = livepage.module_name(shared, own)
    assert name.startswith("own-") and name.endswith(".js")
    livepage._publish((str(shared), str(own)), tmp_path, name)
    assert (tmp_path / name).read_text() == "function helper() {}\n\nexport default helper;\n"
    shared.write_text("function helper() { return 1; }\n")
    assert livepage.module_name(shared, own) != name  # a new shared part: a new name, never a stale cache
    assert livepage.module_name(own) != livepage.module_name(shared, own)


def test_the_table_and_the_tail_begin_with_the_shared_part():
    parts, name = livetable._FILES["module"]
    assert [p.name for p in parts] == ["receiver.js", "livetable.js"] and name.startswith("livetable-")
    for own in ("livetable.js", "livetail.js"):
        assert "mountReceiver(" in (livepage.COMPONENTS / own).read_text()
        assert "function mountReceiver" not in (livepage.COMPONENTS / own).read_text()  # one copy: receiver.js
    code = livepage.script("receiver.js", "livetail.js")
    assert code.index("function mountReceiver") < code.index("export default")


DRIVE_TAIL = """
globalThis.window = globalThis;
const pre = { textContent: "" };
const element = { set innerHTML(html) { pre.textContent = html.replace(/<[^>]+>/g, ""); }, querySelector: () => pre };
const triggers = [];
const component = (data) => ({ data, parentElement: element, setTriggerValue: (name, value) => triggers.push([name, value]) });
const { default: mount } = await import(process.argv[2]);
mount(component({ key: "t", op: "draw", epoch: "e1", seq: 1, html: "<pre>a\\nb</pre>", count: 2 }));
const fed = window.__minimindReceivers.get("t")({ op: "extend", epoch: "e1", seq: 2, after: 1, drop: 1, keep: 1, add: ["c"] });
const stale = { key: "t", op: "extend", epoch: "e0", seq: 9, after: 8, drop: 0, keep: 0, add: [] };
mount(component(stale));
mount(component(stale));  // the same message again: asked for once only
const cleanup = mount(component({ key: "t", op: "same", epoch: "e1", seq: 2 }));
cleanup();
console.log(JSON.stringify({ fed, text: pre.textContent, triggers, left: window.__minimindReceivers.size }));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="no Node.js to run the component's code")
def test_the_joined_tail_code_draws_follows_a_feed_and_asks_once_for_a_draw(tmp_path):
    module = tmp_path / "livetail.mjs"
    module.write_text(livepage.script("receiver.js", "livetail.js"))
    driver = tmp_path / "drive.mjs"
    driver.write_text(DRIVE_TAIL)
    run = subprocess.run(["node", str(driver), str(module)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"fed": True, "text": "b\nc", "triggers": [["lost", "e0:9"]], "left": 0}
