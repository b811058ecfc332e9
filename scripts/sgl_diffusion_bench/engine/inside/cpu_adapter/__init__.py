"""CPU adapter for sglang's diffusion runtime: put this directory on PYTHONPATH (see engine_process.cpu_adapter_env)."""
