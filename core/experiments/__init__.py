"""The experiments: one module per experiment (input_length, output_length, prefix_cache, batch), each with
its id, settings, plan and generator; what they share (base: the run context, plans, options); the one
registry of them (registry.EXPERIMENTS); prompts and documents; summaries, verdicts and prices; recorded
samples; and the runner that drives a generator from a worker thread."""
