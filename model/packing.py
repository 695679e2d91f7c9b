"""Attention within each document of packed rows (`--pack 1`), computed only where a document can see,
and sums per document (`document_sums`: DPO's per-side log-probabilities of packed pairs).

A packed row holds many short documents; a block-diagonal causal mask over the whole row would
still make the attention kernel compute every query against every earlier key of the row, most of
them masked out. `DocumentAttention` cuts the queries into chunks and gives each chunk only the keys
from the start of the earliest document any of its queries belongs to (over the batch) up to its
last query, with the block-diagonal causal mask on that window. Every query sees exactly the keys
the full mask would let it see, so the result is the same; the work per token follows the
documents' lengths instead of the row's.
"""
import torch
import torch.nn.functional as F


class DocumentAttention:
    """Stands in for the attention mask of `MiniMindModel` layers on packed rows: the attention
    layer calls it with its queries, keys and values [B, heads, T, D]."""

    CHUNK = 64  # queries per chunk

    def __init__(self, document_ids):
        bsz, seq_len = document_ids.shape
        index = torch.arange(seq_len, device=document_ids.device)
        is_start = torch.ones_like(document_ids, dtype=torch.bool)
        is_start[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
        #: Where each token's document starts within the row (the positions restart there).
        self.document_start = torch.cummax(torch.where(is_start, index, 0), dim=1).values
        chunk_starts = list(range(0, seq_len, self.CHUNK))
        window_starts = self.document_start[:, chunk_starts].min(dim=0).values.tolist()  # one host sync
        self.windows = []
        for q0, k0 in zip(chunk_starts, window_starts):
            q1 = min(q0 + self.CHUNK, seq_len)
            same = document_ids[:, q0:q1].unsqueeze(2) == document_ids[:, k0:q1].unsqueeze(1)
            causal = index[q0:q1].unsqueeze(1) >= index[k0:q1].unsqueeze(0)
            self.windows.append((q0, q1, k0, (same & causal).unsqueeze(1)))

    def position_ids(self):
        return torch.arange(self.document_start.size(1), device=self.document_start.device) - self.document_start

    def __call__(self, q, k, v, dropout_p=0.0, enable_gqa=False):
        return torch.cat([
            F.scaled_dot_product_attention(q[:, :, q0:q1], k[:, :, k0:q1], v[:, :, k0:q1], attn_mask=mask,
                                           dropout_p=dropout_p, enable_gqa=enable_gqa)
            for q0, q1, k0, mask in self.windows], dim=2)


def document_sums(values, document_ids, documents):
    """Sums of `values` [rows, T] over each document of packed rows -> [rows, documents]. Documents are
    numbered within each row from 0 (`documents`: how many numbers a row may use); padding (id < 0)
    belongs to none."""
    rows = torch.arange(values.size(0), device=values.device).unsqueeze(1)
    slot = (rows * documents + document_ids.clamp(min=0)).reshape(-1)
    kept = (document_ids >= 0).reshape(-1)
    sums = values.new_zeros(values.size(0) * documents).index_add(0, slot[kept], values.reshape(-1)[kept])
    return sums.view(values.size(0), documents)
