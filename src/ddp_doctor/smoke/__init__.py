"""The smoke-training job: options, plan, launch, monitor, verdict and its codes."""
