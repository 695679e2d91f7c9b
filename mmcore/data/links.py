"""The links between the Data page and the Train page, as query parameters.

"Train on this file" opens the Train page with `?data=<data_path>&type=<type>&max_seq_len=<n>`
(`train_params`); the Train page fills its form from them once (`read_train_params`). The Train page's
preflight links to the Data page with `?file=<path>` when the data file is the problem (`data_problem`).
"""
from mmcore.train import preflight, preset_table, train_types
from trainer.rules import specs

DATA_PAGE = "pages/data.py"
TRAIN_PAGE = "pages/train.py"


def train_params(data_path, train_type, max_seq_len):
    return {"data": str(data_path), "type": train_type, "max_seq_len": str(int(max_seq_len))}


def read_train_params(query):
    """(train_type, {"data_path": ..., "max_seq_len": ...}) from the Train page's query parameters, or
    None when they hold no data link (or an unknown type)."""
    data, train_type = query.get("data"), query.get("type")
    if not data or train_type not in train_types.TYPES:
        return None
    values = {"data_path": str(data)}
    length = str(query.get("max_seq_len") or "")
    if length.isdigit() and int(length) > 0:
        values["max_seq_len"] = length
    return train_type, values


def is_demo_file(data_path):
    """True for a file of the bundled demo data (`dataset/demo/`): a form for it opens at the demo sizes."""
    demo = preflight.resolve(preflight.TRAINER_DIR, preset_table.DEMO_DIR)
    return preflight.resolve(preflight.TRAINER_DIR, data_path).parent == demo


def data_problem(train_type, data_path):
    """True when the preflight finds the (existing) data file unusable for the type: worth a look on the Data page."""
    if not data_path:
        return False
    path = preflight.resolve(preflight.TRAINER_DIR, data_path)
    if not path.is_file():
        return False
    return bool(preflight.data(specs.spec(train_type), {"data_path": data_path}, preflight.TRAINER_DIR))


def data_page_params(data_path):
    """The Data page's query parameters for a Train form's data_path (relative to trainer/)."""
    return {"file": str(preflight.resolve(preflight.TRAINER_DIR, data_path))}
