"""The names `gencc train` and `gencc.training.train` accept, kept free of torch so the command line can check
them (and print its help) without importing it."""

#: the optimizers `train` offers (from torch.optim)
OPTIMIZERS = ("sgd", "momentum", "adam")
#: the workloads `gencc train` knows
TRAIN_WORKLOADS = ("digits-cnn", "mnist1d-cnn", "digits-logreg")
