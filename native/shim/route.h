/* Route mode: the virtual platform (route.c) and its Python side (runtime/route/). */
#ifndef CLPROJ_ROUTE_H
#define CLPROJ_ROUTE_H
#include <stdint.h>

#include "route_types.h"

int32_t clproj_py_route(clproj_rcall *);
void *clproj_route_handle(int32_t kind, int64_t id);
void *clproj_route_static(int32_t kind);
void clproj_route_closed(void);
void clproj_route_retain(void *h);
void clproj_route_release(void *h);
void clproj_route_fire(void *fn, void *event, int32_t status, void *user);
int clproj_route_on(void);

#endif
