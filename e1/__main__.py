from e1.cli import main

main()
