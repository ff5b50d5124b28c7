// clproj statistics plugin for Oclgrind: entry points.
// Oclgrind calls initializePlugins() when it loads a library named in
// OCLGRIND_PLUGINS, and releasePlugins() before it unloads it.
#include "stats_plugin.h"

#include <oclgrind/Context.h>

static clproj::StatsPlugin *g_plugin = nullptr;

extern "C" void initializePlugins(oclgrind::Context *context) {
  g_plugin = new clproj::StatsPlugin(context);
  context->registerPlugin(g_plugin);
}

extern "C" void releasePlugins(oclgrind::Context *context) {
  context->unregisterPlugin(g_plugin);
  delete g_plugin;
  g_plugin = nullptr;
}
