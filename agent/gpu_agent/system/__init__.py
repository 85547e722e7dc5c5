"""Layer 1, the host: what the agent reads of the machine, safely. /proc maps and
comm (procfs), another process's memory (procmem), ELF files (elf), files another
process controls (safe_open), files handed to the invoking user (atomic), and a
process's pod (k8s). Imports nothing of the agent."""
