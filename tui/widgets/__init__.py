"""The console's widgets: the runs table, the detail pane, an output as it reads, the footer."""
