from infergate_dev.localcluster.executor.agent import main

main()
