"""The Data page's wing: what a training data file holds and what training will make of it (torch-free).

- `sources`: which files may be opened (dataset/, the read roots, uploads) and the checks before
  opening one (outside the roots, unreadable, empty, binary).
- `checkup`: the streaming format and health scan (the trainers' own row validation from
  `dataset.formats`, duplicates, empty answers, role order, DPO pairs, reasoning tags).
- `sizing`: token-length figures against a `max_seq_len` (truncation, answer tokens lost, steps per epoch).
- `scans`: the background full-file scan (a `mmcore.workers.data_worker` child process), cached by file
  size+mtime+tokenizer in the dashboard home and shared by every session.
- `rows`: reading rows by line number and searching, without a full scan; `row_client`: a row's tokens
  and loss mask from the data worker, which computes them with the trainers' dataset classes.
- `report`: the one report of `python -m mmcore data check` and `mmcore.api.check_data`;
  `links`: the Data page <-> Train page links.
"""
