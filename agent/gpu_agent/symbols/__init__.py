"""Layer 3, names for addresses: native frames (native), C++ names (demangle),
Python frames read from the interpreter (python/), and cubins' line tables
(cubin, cubin_store). Imports the layers below."""
