"""Stage 05 (visualize): weighted t-SNE maps, fitted weights, the explorer, Bokeh pages and the pane."""
