"""pytest front end of the percache conformance suite (``pytest conformance --model PATH``)."""
