"""Writing folders safely: the one rule of every output flag, a folder replaced only when
cmlm_tf's marker file says it wrote it (`output_folders`); folders written beside their
destination and renamed into place (`staged_folder`); locks on shared folders (`locks`); and a
full disk reported as one line (`disk`)."""
