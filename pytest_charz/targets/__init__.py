"""Target descriptions: the TOML catalogue, the host CPU derived at run time, and their views.

Import the submodules directly (``from pytest_charz.targets.catalogue import resolve``); this
package module stays free of imports so importing the plugin stays cheap.
"""
