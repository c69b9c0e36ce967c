"""NVIDIA AIConfigurator's system names (its kernel tables' GPU folders, its serving rows'
`system` column) and the GPU presets that stand for them: one mapping for every suite that
reads AIConfigurator's data."""

PRESET_BY_GPU = {"a100_sxm": "a100-sxm4-80gb", "h100_sxm": "h100-sxm5-80gb", "h200_sxm": "h200-sxm-141gb",
                 "b200_sxm": "b200-sxm-180gb", "b300_sxm": "b300-sxm-288gb", "gb200": "gb200-nvl72",
                 "gb300": "gb300-nvl72"}
# each system's GPU die: a fit on one GPU of a family predicts its siblings' tables (held out)
FAMILY_BY_GPU = {"a100_sxm": "ampere", "h100_sxm": "hopper", "h200_sxm": "hopper", "b200_sxm": "blackwell",
                 "b300_sxm": "blackwell", "gb200": "blackwell", "gb300": "blackwell"}
FORM_FACTOR_SUFFIX = "_sxm"  # the database names some parts with it and some without (gb200)


def preset_for_system(system: str) -> str:
    """The preset standing for an AIConfigurator system name, with or without its form-factor
    suffix ("gb200_sxm" is "gb200"); "" when none does."""
    bare = system.strip().lower().removesuffix(FORM_FACTOR_SUFFIX)
    return PRESET_BY_GPU.get(bare) or PRESET_BY_GPU.get(bare + FORM_FACTOR_SUFFIX, "")
