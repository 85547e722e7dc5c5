"""Sending profiles to a backend: Parca (WriteRaw) and OTLP profiles over gRPC.

  endpoint.py  grpc[s]://HOST:PORT -> a gRPC channel (TLS with system CAs or a
               CA file, --insecure-skip-verify, bearer token from a file)
  queue.py     bounded send queue: one sender thread, retries with exponential
               backoff and jitter, drop-oldest or backpressure, every drop counted
  parca.py     one window -> parca.profilestore.v1alpha1.WriteRawRequest
  otlp.py      one window -> opentelemetry ExportProfilesServiceRequest
"""
