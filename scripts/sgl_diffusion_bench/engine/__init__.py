"""The machine and the installed engine: environment discovery and GPUs, what the engine accepts (the probe), how its
command is built, how it is started and stopped (cold processes, warm engines), the tiny local models, model access
and request manifests read by the engine's own parser. The effects of running an engine live here."""
