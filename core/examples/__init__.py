"""Example workflows bundled with relaypoint; ``relaypoint.examples.audit`` audits a local directory."""
