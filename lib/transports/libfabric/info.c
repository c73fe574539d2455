/* SPDX-License-Identifier: BSD-3-Clause */
/* LIBFABRIC: provider discovery: probe, the hints, the choice, and the
 * sentence that says why none fits */
#include "lf.h"

int nxl_lf_probe(char *why, size_t cap)
{
    if (!nxl_lf_loaded()) {
        snprintf(why, cap, "libfabric could not be loaded: %s", nxl_lf_sym.why);
        return 0;
    }
    uint32_t v = fi_version();
    snprintf(why, cap, "libfabric %u.%u: DRAM, remote and loopback, notifications; no VRAM "
             "(FI_HMEM not used yet)", FI_MAJOR(v), FI_MINOR(v));
    return 1;
}

struct fi_info *nxl_lf_base_hints(const char *prov, const char *domain)
{
    struct fi_info *h = lf_allocinfo();
    if (!h)
        return NULL;
    h->ep_attr->type = FI_EP_RDM;
    h->caps = LF_CAPS;
    h->mode = 0;
    h->addr_format = FI_FORMAT_UNSPEC;
    h->domain_attr->mr_mode = LF_MR_MODES;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->domain_attr->resource_mgmt = FI_RM_ENABLED;
    /* no RMA ordering needed (the notification waits for the writes'
     * completions): shm then writes one-sided (CMA) */
    h->tx_attr->msg_order = FI_ORDER_SAS;
    h->rx_attr->msg_order = FI_ORDER_SAS;
    if (prov)
        h->fabric_attr->prov_name = strdup(prov);
    if (domain)
        h->domain_attr->name = strdup(domain);
    return h;
}

/* Does this entry live on interface iface? The domain is named after it
 * (tcp, sockets), or its source address is one of the interface's. */
static bool on_iface(const struct fi_info *i, const char *iface)
{
    if (!iface)
        return true;
    if (i->domain_attr && i->domain_attr->name && !strcmp(i->domain_attr->name, iface))
        return true;
    if (!i->src_addr || (i->addr_format != FI_SOCKADDR_IN && i->addr_format != FI_SOCKADDR_IN6))
        return false;
    struct ifaddrs *ifs, *p;
    bool found = false;
    if (getifaddrs(&ifs))
        return false;
    const struct sockaddr *sa = i->src_addr;
    for (p = ifs; p && !found; p = p->ifa_next) {
        if (!p->ifa_addr || strcmp(p->ifa_name, iface) || p->ifa_addr->sa_family != sa->sa_family)
            continue;
        if (sa->sa_family == AF_INET)
            found = !memcmp(&((const struct sockaddr_in *)sa)->sin_addr,
                            &((const struct sockaddr_in *)p->ifa_addr)->sin_addr,
                            sizeof(struct in_addr));
        else
            found = !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr,
                            &((const struct sockaddr_in6 *)p->ifa_addr)->sin6_addr,
                            sizeof(struct in6_addr));
    }
    freeifaddrs(ifs);
    return found;
}

static bool link_local(const struct fi_info *i)
{
    return i->fabric_attr && i->fabric_attr->name && !strncasecmp(i->fabric_attr->name, "fe80", 4);
}

/* the entry to use: tcp;ofi_rxm first unless a provider was asked for,
 * the first one on iface, link-local IPv6 last */
static struct fi_info *choose(struct fi_info *list, const char *domain, const char *iface,
                              bool asked)
{
    struct fi_info *best = NULL;
    int best_score = -1;
    for (struct fi_info *i = list; i; i = i->next) {
        if (!on_iface(i, iface) ||
            (domain && (!i->domain_attr->name || strcmp(i->domain_attr->name, domain))))
            continue;
        int score = 10;
        if (!asked && !strcmp(i->fabric_attr->prov_name, "tcp;ofi_rxm"))
            score += 4;
        if (!asked && !strcmp(i->fabric_attr->prov_name, "net"))
            score -= 2; /* its wait fd never sleeps */
        if (link_local(i))
            score -= 5;
        if (score > best_score) {
            best = i;
            best_score = score;
        }
    }
    return best;
}

/* What libfabric offers here, for a sentence: "tcp;ofi_rxm (eth0, lo), shm (shm)". */
static void list_offers(struct fi_info *list, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = 0;
    for (struct fi_info *i = list; i && o < cap - 1; i = i->next) {
        const char *p = i->fabric_attr->prov_name, *d = i->domain_attr->name;
        bool seen = false;
        for (struct fi_info *j = list; j != i && !seen; j = j->next)
            seen = !strcmp(j->fabric_attr->prov_name, p) && !strcmp(j->domain_attr->name, d);
        if (seen)
            continue;
        bool same_prov = false;
        for (struct fi_info *j = list; j != i && !same_prov; j = j->next)
            same_prov = !strcmp(j->fabric_attr->prov_name, p);
        if (!same_prov)
            o += (size_t)snprintf(out + o, cap - o, "%s%s [%s", o ? "], " : "", p, d);
        else
            o += (size_t)snprintf(out + o, cap - o, " %s", d);
    }
    if (o && o < cap - 1)
        snprintf(out + o, cap - o, "]");
}

/* No provider matched: say what libfabric has and which hint to relax. */
static void explain_none(nxlt_ctx_t *ctx, const char *prov, const char *domain, const char *iface,
                         int r)
{
    char offers[400] = "nothing", hint[200] = "";
    struct fi_info *h, *info = NULL;
    /* everything RDM with RMA and messages, ignoring our other wishes */
    if ((h = lf_allocinfo())) {
        h->ep_attr->type = FI_EP_RDM;
        h->caps = FI_MSG | FI_RMA;
        h->mode = ~0ULL;
        h->domain_attr->mr_mode = LF_MR_MODES | FI_MR_RAW | FI_MR_HMEM | FI_MR_RMA_EVENT;
        if (!fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &info)) {
            list_offers(info, offers, sizeof(offers));
            fi_freeinfo(info);
        }
        fi_freeinfo(h);
    }
    /* the first relaxation that finds something */
    struct {
        const char *what;
        const char *prov, *domain;
        bool any_mode, raw, no_rma;
    } tries[] = {
        {"drop 'iface'/'domain'", prov, NULL, false, false, false},
        {"drop 'provider' (and check FI_PROVIDER)", NULL, domain, false, false, false},
        {"nothing: the provider needs FI_MR_RAW keys, which nxl does not support", prov, domain,
         false, true, false},
        {"nothing: the provider needs mode bits (FI_CONTEXT...) nxl does not offer", prov, domain,
         true, false, false},
        {"nothing: the provider has no RMA (FI_RMA) on RDM endpoints; nxl needs it", prov, domain,
         false, false, true},
    };
    for (size_t t = 0; t < sizeof(tries) / sizeof(*tries) && !hint[0]; t++) {
        if (t == 0 && !domain && !iface)
            continue;
        if (t == 1 && !prov)
            continue;
        if (!(h = nxl_lf_base_hints(tries[t].prov, tries[t].domain)))
            break;
        if (tries[t].any_mode)
            h->mode = ~0ULL;
        if (tries[t].raw)
            h->domain_attr->mr_mode |= FI_MR_RAW;
        if (tries[t].no_rma)
            h->caps = FI_MSG | FI_SEND | FI_RECV;
        info = NULL;
        if (!fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &info)) {
            if (t > 1 || choose(info, tries[t].domain, t == 0 ? NULL : iface, true))
                snprintf(hint, sizeof(hint), "relax: %s", tries[t].what);
            fi_freeinfo(info);
        }
        fi_freeinfo(h);
    }
    const char *env = getenv("FI_PROVIDER");
    nxlt_error(ctx, "LIBFABRIC: fi_getinfo found no provider with RDM endpoints, RMA and "
               "messages for provider=%s, domain=%s, iface=%s%s%s (%s); libfabric offers here "
               "(RDM, RMA): %s; %s",
               prov ? prov : "any", domain ? domain : "any", iface ? iface : "any",
               env ? ", FI_PROVIDER=" : "", env ? env : "", r ? fi_strerror(-r) : "none matched",
               offers, hint[0] ? hint : "check the parameters against 'fi_info -t FI_EP_RDM'");
}

/* The provider entry to use (a copy, the caller's): first one that
 * completes writes on delivery (FI_DELIVERY_COMPLETE), unless @p no_dc,
 * then one without (*@p dc says which). When none fits, the agent's error
 * says what libfabric offers and what to relax (explain_none). */
nxl_status_t nxl_lf_pick(nxlt_ctx_t *ctx, const char *prov, const char *domain, const char *iface,
                         bool no_dc, struct fi_info **out, bool *dc)
{
    struct fi_info *h = nxl_lf_base_hints(prov, domain), *list = NULL;
    if (!h)
        return NXL_ERR_UNKNOWN;
    h->tx_attr->op_flags = no_dc ? 0 : FI_DELIVERY_COMPLETE;
    int r = fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &list);
    struct fi_info *pick = r ? NULL : choose(list, domain, iface, prov != NULL);
    *dc = pick != NULL && !no_dc;
    if (!pick) {
        if (list)
            fi_freeinfo(list);
        list = NULL;
        h->tx_attr->op_flags = 0;
        r = fi_getinfo(LF_API_VERSION, NULL, NULL, 0, h, &list);
        pick = r ? NULL : choose(list, domain, iface, prov != NULL);
    }
    fi_freeinfo(h);
    if (!pick) {
        if (list)
            fi_freeinfo(list);
        explain_none(ctx, prov, domain, iface, r);
        return NXL_ERR_BACKEND;
    }
    *out = fi_dupinfo(pick);
    fi_freeinfo(list);
    return *out ? NXL_SUCCESS : NXL_ERR_UNKNOWN;
}
