from infergate.localcluster.executor.agent import main

main()
