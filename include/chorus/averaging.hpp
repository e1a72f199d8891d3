// Model averaging: topologies and the schemes over them.
//   #include <chorus/averaging.hpp>
#pragma once

#include <chorus/averaging/allreduce_sgd.hpp>
#include <chorus/averaging/consensus.hpp>
#include <chorus/averaging/diloco.hpp>
#include <chorus/averaging/dpsgd.hpp>
#include <chorus/averaging/easgd.hpp>
#include <chorus/averaging/easgd_async.hpp>
#include <chorus/averaging/gosgd.hpp>
#include <chorus/averaging/heterogeneity.hpp>
#include <chorus/averaging/job_progress.hpp>
#include <chorus/averaging/local_optimizer.hpp>
#include <chorus/averaging/local_sgd.hpp>
#include <chorus/averaging/neighbour_exchange.hpp>
#include <chorus/averaging/one_sided_gossip.hpp>
#include <chorus/averaging/parameter_server.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/averaging/topology.hpp>
#include <chorus/averaging/tree_easgd.hpp>
