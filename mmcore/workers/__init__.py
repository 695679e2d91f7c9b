"""The dashboard's torch side: child processes that load models (chat, evaluation). The pages never import
these modules; they start them with `python -m` (mmcore.models.chat_client, mmcore.models.eval_jobs)."""
