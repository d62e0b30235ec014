"""What crosses the edge: range checks of input, cursors, timestamps and text made safe for a terminal."""
