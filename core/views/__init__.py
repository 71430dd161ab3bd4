"""What turns records into text for people, shared by the CLI and the console: stored text shown
literally (:mod:`~relaypoint.views.display`, rich ``Text``) and what a pattern's records say
(:mod:`~relaypoint.views.patterns`). The engine never imports it, so it needs no rendering library."""
