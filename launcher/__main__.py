"""python -m launcher ARCHITECTURE [flags] -- [runner flags]: launch.py's main."""
import harness
from launcher.launch import main

harness.main(main)
