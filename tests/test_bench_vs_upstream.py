"""The pieces of bench/bench_vs_upstream.py that decide what its figures mean: the model FLOP count and
the full-row data both sides read."""
import torch

from bench import bench_vs_upstream as bench
from dataset.lm_dataset import DPODataset, PretrainDataset, SFTDataset
from model.model_minimind import MiniMindConfig, MiniMindForCausalLM
from trainer.trainer_utils import load_tokenizer


def test_matmul_params_are_the_models_matrix_weights():
    for hidden, layers in ((64, 2), (512, 8), (768, 3)):
        model = MiniMindForCausalLM(MiniMindConfig(hidden_size=hidden, num_hidden_layers=layers))
        linear = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
        assert bench.matmul_params(hidden, layers) == linear + model.lm_head.weight.numel()


def test_model_flops_count_training_forward_and_decoding():
    n = bench.matmul_params(64, 2)
    assert bench.model_flops({"train": 10}, 64, 2) == 10 * 6 * n
    assert bench.model_flops({"forward": 3, "decode": 5}, 64, 2) == 3 * 2 * n + 5 * 2 * n
    attention = 2 * 2 * 64 * 100  # 2 x layers x hidden x row length, per position and pass
    assert bench.model_flops({"train": 1, "forward": 1, "row_len": 100}, 64, 2) == 8 * n + 4 * attention


def test_full_rows_fill_max_seq_len_for_every_supervised_dataset(tmp_path):
    """Every row of the full-row files reaches max_seq_len in this project's datasets (upstream's
    datasets cut at the same length), so neither side has padding to skip."""
    max_len = 64
    files = bench.full_row_files(str(tmp_path), max_len)
    tokenizer = load_tokenizer()
    for kind, dataset_class, key in (("pretrain", PretrainDataset, "input_ids"), ("sft", SFTDataset, "input_ids"),
                                     ("dpo", DPODataset, "chosen_input_ids")):
        dataset = dataset_class(files[kind], tokenizer, max_len)
        assert len(dataset) == 48
        for i in range(len(dataset)):
            item = dataset[i]
            assert item[key].numel() == max_len
            if kind == "dpo":
                assert item["rejected_input_ids"].numel() == max_len
