"""Recommendation slates (GRAIL): which video a viewer clicks next, and where their opinion goes."""
