"""The static dashboard site: `enablebot site RESULTS... --out site/`.

build.py loads result sets (sweep directories, baseline files), fix bundles, the
registry and an optional compare file into typed rows and derived views (shares,
trend, new breaks, clusters); links.py makes the outgoing URLs; pages.py renders
HTML; assets/ holds the CSS and the small table script, copied beside the pages so
the site works from files and without a network.
"""
