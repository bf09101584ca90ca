package ec2fake

import "strings"

// elbAuthorizations are what an ELBv2 request needs allowed (R76), as the Service Authorization Reference
// lists them ("Actions, resources, and condition keys for Elastic Load Balancing V2": the resource types
// loadbalancer/net, arn:aws:elasticloadbalancing:<region>:<account>:loadbalancer/net/<name>/<id>, targetgroup,
// ...:targetgroup/<name>/<id>, and listener/net, ...:listener/net/<lb name>/<lb id>/<id>; the condition keys
// aws:RequestTag, aws:ResourceTag and elasticloadbalancing:CreateAction):
//
//   - CreateLoadBalancer and CreateTargetGroup: their action on the resource they make, <type>/<name>/*, with
//     the tags they ask for as aws:RequestTag/<key>; with tags also elasticloadbalancing:AddTags on it, with
//     elasticloadbalancing:CreateAction naming the create ("Elastic Load Balancing User Guide": tag on create
//     needs the AddTags permission too).
//   - CreateListener: its action on the load balancer, with its tags; with tags also AddTags on the listener it
//     makes, listener/net/<lb name>/<lb id>/*.
//   - RegisterTargets, DeregisterTargets, DeleteTargetGroup, DeleteLoadBalancer, DeleteListener, AddTags and
//     RemoveTags: their action on each resource named, with its tags when it exists (AddTags with
//     aws:RequestTag too; RemoveTags' aws:TagKeys, a set, is not set: R51's subset has no set qualifiers).
//   - Describe actions have no resource-level permissions: "*".
func (s *Server) elbAuthorizations(rg *region, c *call) []authzRequest {
	base := s.baseContext(c)
	action := "elasticloadbalancing:" + c.action
	f := c.form
	if strings.HasPrefix(c.action, "Describe") {
		return []authzRequest{{action: action, resource: "*", ctx: base}}
	}
	requested, _ := elbTags(f) // refused by the action when they do not parse
	if len(requested) == 0 {
		requested = nil
	}
	existing := func(action, arn string, requestTags map[string]string) authzRequest {
		ctx := base
		if tags, e := rg.elb().tagged(arn); e == nil {
			ctx.tags = *tags
		}
		ctx.requestTags = requestTags
		return authzRequest{action: action, resource: arn, ctx: ctx}
	}
	made := func(resource string) []authzRequest {
		ctx := base
		ctx.requestTags = requested
		reqs := []authzRequest{{action: action, resource: resource, ctx: ctx}}
		if requested != nil {
			tagCtx := base.with("elasticloadbalancing:CreateAction", c.action)
			tagCtx.requestTags = requested
			reqs = append(reqs, authzRequest{action: "elasticloadbalancing:AddTags", resource: resource, ctx: tagCtx})
		}
		return reqs
	}
	switch c.action {
	case "CreateLoadBalancer":
		return made(s.elbARN(rg, "loadbalancer/net/"+f.str("Name")+"/*"))
	case "CreateTargetGroup":
		return made(s.elbARN(rg, "targetgroup/"+f.str("Name")+"/*"))
	case "CreateListener":
		lbARN := f.str("LoadBalancerArn")
		reqs := []authzRequest{existing(action, lbARN, requested)}
		if requested != nil {
			_, rest, _ := strings.Cut(lbARN, ":loadbalancer/")
			tagCtx := base.with("elasticloadbalancing:CreateAction", c.action)
			tagCtx.requestTags = requested
			reqs = append(reqs, authzRequest{action: "elasticloadbalancing:AddTags", resource: s.elbARN(rg, "listener/"+rest+"/*"), ctx: tagCtx})
		}
		return reqs
	case "RegisterTargets", "DeregisterTargets", "DeleteTargetGroup":
		return []authzRequest{existing(action, f.str("TargetGroupArn"), nil)}
	case "DeleteLoadBalancer":
		return []authzRequest{existing(action, f.str("LoadBalancerArn"), nil)}
	case "DeleteListener":
		return []authzRequest{existing(action, f.str("ListenerArn"), nil)}
	case "AddTags", "RemoveTags":
		var reqs []authzRequest
		for _, arn := range f.list("ResourceArns.member") {
			reqs = append(reqs, existing(action, arn, requested))
		}
		return reqs
	}
	return nil
}
