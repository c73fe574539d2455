/* SPDX-License-Identifier: BSD-3-Clause */
/* For tests/nxl_info.sh, the library's answers without nxl_info:
 *   nxl_info_probe list                 each transport of nxl_plugins_available(),
 *                                       "NAME available|unavailable", then "version V"
 *   nxl_info_probe create NAME KEY VAL  nxl_backend_create(NAME, {KEY, VAL}) in a new
 *                                       agent: prints the status and the sentence;
 *                                       exit 0 on NXL_SUCCESS, else 1 */
#include <nxl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "list")) {
        size_t n = nxl_plugins_available(NULL, 0);
        nxl_plugin_info_t *p = calloc(n ? n : 1, sizeof(*p));
        n = nxl_plugins_available(p, n);
        for (size_t i = 0; i < n; i++)
            printf("%s %s\n", p[i].name, p[i].available ? "available" : "unavailable");
        printf("version %s\n", nxl_version());
        free(p);
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "create")) {
        nxl_agent_config_t c;
        nxl_agent_config_init(&c);
        c.name = "probe";
        c.log_level = NXL_LOG_NONE;
        nxl_agent_t *a;
        if (nxl_agent_create(&c, &a) != NXL_SUCCESS) {
            printf("agent: %s\n", nxl_agent_last_error(NULL));
            return 2;
        }
        nxl_param_t p = {argv[3], argv[4]};
        nxl_status_t st = nxl_backend_create(a, argv[2], &p, 1, NULL);
        printf("%s: %s\n", nxl_status_name(st), nxl_agent_last_error(a));
        nxl_agent_destroy(a);
        return st == NXL_SUCCESS ? 0 : 1;
    }
    fprintf(stderr, "usage: nxl_info_probe list | create NAME KEY VALUE\n");
    return 2;
}
