"""Sending profiles to a backend: the local directory, Parca (WriteRaw) and OTLP
profiles over gRPC.

  backends.py  the one interface all three share, and make_backend that builds each
  local.py     one gzip pprof per window in a directory, bounded in bytes
  endpoint.py  grpc[s]://HOST:PORT -> a gRPC channel (TLS with system CAs or a
               CA file, --insecure-skip-verify, bearer token from a file)
  queue.py     bounded send queue: one sender thread, retries with exponential
               backoff and jitter, drop-oldest or backpressure, every drop counted
  parca.py     one window -> parca.profilestore.v1alpha1.WriteRawRequest
  otlp.py      one window -> opentelemetry ExportProfilesServiceRequest
"""
