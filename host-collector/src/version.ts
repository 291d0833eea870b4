// The collector's and CLI's version: `vsockdiag --version`, and vsockdiag_build_info.
export const VERSION = '0.1.0';
