"""The core: the trace format (reading `tracefile`, writing `tracewriter`,
`escape`), statistics (`stats`), the start-up runs CSV (`startup_csv`),
plain-text tables (`tables`) and stopping a child (`process`). Standard
library only: the tools run it under sudo with the system Python."""
