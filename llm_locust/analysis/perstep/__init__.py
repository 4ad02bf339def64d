"""Per-step figures of a load shape: the step table, baseline, rate, inputs, goodput, workers."""
