"""The core: the trace format (reading `tracefile`, writing `tracewriter`,
`escape`), statistics (`stats`), the start-up runs CSV (`startup_csv`) and
plain-text tables (`tables`). Standard library only: the tools run it under
sudo with the system Python."""
