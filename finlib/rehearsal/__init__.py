"""`make rehearse`: both papers' full runs offline against simulated servers, then checked.

The test doubles live here too (`stub_server`, `simulated_servers`, `fault_proxy`): servers that
answer like real ones, so the library below never carries them.
"""
