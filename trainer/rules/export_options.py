"""The export's command-line options, shared by `minimind export` (the dashboard side, torch-free) and
`python -m model.export_hf` (the export itself)."""

#: The dtypes model.safetensors may be written in; the first is the default.
DTYPE_NAMES = ("float32", "float16", "bfloat16")
#: Export formats: a plain Llama folder (the default where the model allows it), MiniMind's custom-code
#: folder, GGUF (+ Ollama Modelfile), a LoRA as a PEFT adapter.
FORMATS = ("llama", "minimind", "gguf", "peft")
#: GGUF tensor types; the first is the default.
GGUF_TYPES = ("f16", "f32", "q8_0")


def add_export_options(parser):
    """The export's arguments, the same for `python -m mmcore export` and `python -m model.export_hf`."""
    parser.add_argument("weight", help="MiniMind weight file (.pth state dict)")
    parser.add_argument("out_dir", help="folder to create (must not exist, or be empty)")
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="llama: plain LlamaForCausalLM folder (default; a MoE model falls back to minimind); "
                             "minimind: custom-code folder; gguf: .gguf + Ollama Modelfile; peft: --lora as a PEFT "
                             "adapter on a Llama base")
    parser.add_argument("--gguf_type", choices=GGUF_TYPES, default=GGUF_TYPES[0], help="GGUF tensor type (default f16)")
    parser.add_argument("--hidden_size", type=int, help="hidden size (default: what the file says)")
    parser.add_argument("--num_hidden_layers", type=int, help="layers (default: what the file says)")
    parser.add_argument("--use_moe", type=int, choices=(0, 1), help="MoE model (default: what the file says)")
    parser.add_argument("--lora", help="LoRA file: merged into the weights, or (--format peft) the adapter")
    parser.add_argument("--tokenizer_path", help="tokenizer folder (default: the bundled model/)")
    parser.add_argument("--dtype", choices=DTYPE_NAMES, default=DTYPE_NAMES[0],
                        help="dtype of model.safetensors (default float32: exactly the .pth model's logits)")
    parser.add_argument("--verify", type=int, choices=(0, 1), default=1,
                        help="load the export again and compare it with the model (default 1)")
